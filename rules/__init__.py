"""Engine profiles and training conventions, shipped as package data (``flowtrace.bundled_rules``)."""
