from pathlib import Path

import pytest

CAPTURES = Path(__file__).parent / "fixtures" / "captures"


@pytest.fixture
def captures() -> Path:
    return CAPTURES
