"""The demos profile: the routing claims of the public grid demos, judged in minutes instead of an hour.

Each module judges one demo of the routing guide's demo-to-capability map (routing guide 12): one test per
claim of the demo README's "What It Proves" list, in the claim's words, with the spec sentences it rests
on. These tests judge a demo, not an implementation's conformance, so they have a level of their own
(``demo``) and run only when asked for (``agn-conformance run --profile demos`` or ``agn-conformance demo
NAME``). Claims outside AGN routing are listed as not applicable, with the reason.
"""
