"""Tests of ``twin.nccl_model``."""
