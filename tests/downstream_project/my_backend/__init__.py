"""The downstream project's backend (it receives a model runner like SGLang's backends do)."""


class MyBackend:
    def __init__(self, model_runner, *, sm_major: int) -> None:
        self.window = model_runner.sliding_window_size
        self.page_size = model_runner.page_size
        self.topk = model_runner.model_config.hf_config.index_topk
        if sm_major >= 10:  # the Blackwell-only read that broke hand-written mocks
            self.kv_counters = model_runner.max_running_requests
