"""The failure zoo: small plain-PyTorch training scripts, each failing (or not) in a known way."""
