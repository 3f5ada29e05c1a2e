"""Deliberately broken gateways: the reference gateway with one behaviour patched wrong.

The conformance suites are judged by running them against these gateways, plugged in exactly the way a
vendor gateway is: each broken behaviour must make its target conformance tests fail, so every test of a
suite is shown to be able to fail.
"""
