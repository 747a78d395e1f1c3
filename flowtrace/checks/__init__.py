"""Rules, one small module each, named after what they find. Importing this package registers them."""

from flowtrace.checks import (  # noqa: F401
    capture_paths,
    config_readers,
    dead_capture,
    diagnostics,
    holders,
    inconsistent_conventions,
    missing_capture,
    return_path,
    stream,
    unreachable_boundaries,
)

try:  # the CI-contract rule (FT016) lives beside the suppression logic
    from flowtrace.checks import unused_suppression  # noqa: F401
except ImportError:  # pragma: no cover
    pass
