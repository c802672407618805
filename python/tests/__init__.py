"""Tests of the kiln Python package; run from the repository root: python3 -m unittest discover -s python/tests -t python"""
