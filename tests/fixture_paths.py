"""Where the fixture engines live (importable from any test module)."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
SGLANG_LIKE = FIXTURES / "sglang_like"
VLLM_LIKE = FIXTURES / "vllm_like"
LMDEPLOY_LIKE = FIXTURES / "lmdeploy_like"
TRTLLM_LIKE = FIXTURES / "trtllm_like"
