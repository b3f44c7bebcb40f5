"""Live tuning on real NCCL inside a running job (torch.distributed, tuner plugin, coordinator)."""
