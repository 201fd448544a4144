"""PF2 — host-device synchronisation inside training and evaluation loops."""
