"""Mutation testing of the reference: does the suite notice a small change to code that implements the spec?"""
