"""Tests of ``twin.topology``."""
