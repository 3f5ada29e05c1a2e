"""Deliberately broken components: the reference gateway or operator with one behaviour patched wrong.

The conformance suites are judged by running them against these components, plugged in exactly the way a
vendor's are (an implementation descriptor): each broken behaviour must make its target conformance tests
fail, so every test of a suite is shown to be able to fail. `judge.py` runs a profile's suite against each
breakage and reads the verdicts; `breakages.py` breaks gateways, `operator_breakages.py` operators.
"""
