"""PF1 — data loading: DataLoader options and host-to-device copies."""
