"""The suite the `specguard tune` tests run: seed A's MTP on the emulator, three levels."""

SIM_SUITE = """
[sweep]
concurrency = [1, 16, 64]
requests_per_worker = 2
warmup = 1
repeats = 2

[workload]
kind = "repeated-id"
input_len = 200
output_len = 40

[tolerances]
throughput = 0.05
prior_between_sd = 0.02

[servers.baseline]
engine = "emulator"
model_path = "/models/Qwen3.5-122B-A10B"
args = ["--emulator-profile", "seed-a"]

[servers.mtp]
engine = "emulator"
model_path = "/models/Qwen3.5-122B-A10B"
speculative_algorithm = "NEXTN"
num_steps = 1
eagle_topk = 1
num_draft_tokens = 2
reference = "baseline"
args = ["--emulator-profile", "seed-a"]
"""
