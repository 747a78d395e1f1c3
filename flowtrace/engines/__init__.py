"""Engine knowledge as data: loading and validating engine profiles and training conventions."""
