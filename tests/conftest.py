"""Test-wide settings: hypothesis has no per-example deadline (CI shares 2 slow cores)."""

from hypothesis import settings

settings.register_profile("ccltwin", deadline=None)
settings.load_profile("ccltwin")
