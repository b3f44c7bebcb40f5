"""Tests of ``traces``."""
