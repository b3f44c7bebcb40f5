"""Tests of ``twin``."""
