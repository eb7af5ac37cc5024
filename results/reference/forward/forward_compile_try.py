"""Experiment (not a feature): regional torch.compile of each layer's MLP and RMSNorms, q=1/q=10 timing.

    python results/reference/forward/forward_compile_try.py short   # the --forward value to load with
"""
import torch, time, os, sys
torch.set_num_threads(1)
from specbench_cli.models.load import load_model
from specbench_cli.targets.hf.kv import KVCache
attn = sys.argv[1]
lm = load_model(dtype="float32", forward=attn); m = lm.model
g = torch.Generator().manual_seed(0)
ctx = torch.randint(100, 40000, (1, 400), generator=g); blk = torch.randint(100, 40000, (1, 10), generator=g)
with torch.inference_mode():
    c = KVCache(); m(input_ids=ctx, past_key_values=c.hf, use_cache=True)
    ref = m(input_ids=blk[:, :1], past_key_values=c.hf, use_cache=True).logits; c.crop_to(400)
    for layer in m.model.layers:
        layer.mlp.forward = torch.compile(layer.mlp.forward, dynamic=True)
        layer.input_layernorm.forward = torch.compile(layer.input_layernorm.forward, dynamic=True)
        layer.post_attention_layernorm.forward = torch.compile(layer.post_attention_layernorm.forward, dynamic=True)
    t = time.perf_counter()
    out = m(input_ids=blk[:, :1], past_key_values=c.hf, use_cache=True).logits; c.crop_to(400)
    print('first compiled call s', time.perf_counter() - t, 'maxdiff', (out - ref).abs().max().item(), flush=True)
    for q in (1, 10, 1, 10):
        ts=[]; cs=[]
        for i in range(8):
            t=time.perf_counter(); tc=time.thread_time(); m(input_ids=blk[:, :q], past_key_values=c.hf, use_cache=True); ts.append(time.perf_counter()-t); cs.append(time.thread_time()-tc); c.crop_to(400)
        print('regional-compiled', attn, q, 'wall ms', round(1000*sorted(ts)[4],1), 'cpu ms', round(1000*sorted(cs)[4],1), os.getloadavg()[0], flush=True)
