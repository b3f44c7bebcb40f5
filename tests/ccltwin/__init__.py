"""Tests of the ``ccltwin`` command line."""
