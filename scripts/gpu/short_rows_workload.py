"""For ncu --profile-from-start off: GAE, V-trace and episodic sums at 1024x128 (puffadv and
rl-triton), and Q(lambda) returns at 65536x128 (puffadv), after warm-up calls outside the range."""
import sys, torch
sys.path.insert(0, "benchmarks")
import peer_rl_triton as P
rl, why = P.load()
print(why)
g = torch.Generator(device="cuda").manual_seed(0)
calls = []
d = P.make_inputs(1024, 128, g)
for est in ("gae last_value", "vtrace vs+pg", "episodic cumsum"):
    calls += [P.puffadv_call(est, d)[0], P.rl_triton_call(rl, est, d)]
big = P.make_inputs(65536, 128, g)
calls.append(P.puffadv_call("q_lambda peng returns", big)[0])
for c in calls:  # warm-up: Triton compiles, first launches
    c(); c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for c in calls:
    c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
