"""Tests of ``tuner``."""
