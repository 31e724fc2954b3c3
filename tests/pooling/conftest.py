from __future__ import annotations

import pytest
from pool_helpers import VARIANT_IDS, VARIANTS


@pytest.fixture(params=VARIANTS, ids=VARIANT_IDS)
def variant(request):
    """(name, options) for every registered pooler and the extra variants."""
    return request.param
