"""Training: samples to batches, losses, the trainer and weight publishing."""
