"""`traindoc preflight`: short active probes of a training script before the expensive run."""
