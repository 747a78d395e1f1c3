"""Registers the engine_probe marker (tests that run a real engine in its own venv; opt-in)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "engine_probe: runs the real engine (vLLM CPU build) in FLOWTRACE_ENGINE_VENV; opt-in"
    )
