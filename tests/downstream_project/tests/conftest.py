import pytest

import dsakit


@pytest.fixture
def small_runner():
    return dsakit.MockModelRunner("target", max_running_requests=8, model_config__context_len=4096)
