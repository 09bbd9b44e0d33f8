#!/usr/bin/env python3
"""PyTorch's side of the trainer-vs-PyTorch bench (scripts/bench-torch runs both sides).

One training step of all-MiniLM-L6-v2 + LoRA, the same network and step as our `bert-lora`
job (node/trainer/src/model/bert.rs, trainer.rs, optim.rs), written in plain torch from the
same model.safetensors and config.json:

- BERT encoder, frozen (no gradient for any encoder tensor), no dropout, GELU (erf),
  LayerNorm with the config's eps, attention bias -1e9 on padding;
- LoRA rank 8, alpha 16 (scale alpha/rank) on query and value of every layer:
  delta = x·Aᵀ·Bᵀ·scale, A [rank, hidden] uniform ±1/√hidden, B [hidden, rank] zero;
- a linear head [classes, hidden] on the mask-weighted mean of the last hidden states;
- cross-entropy (mean over the batch), AdamW (lr 2e-3, betas 0.9/0.999, eps 1e-8,
  weight decay 0.01) over the LoRA matrices and the head only;
- fp32, torch.set_num_threads(threads); every row as long as the sequence (no padding).

Settings come from the same environment variables as benches/minilm_step.rs:
GPUCHAIN_BENCH_BATCH, GPUCHAIN_BENCH_SEQ, GPUCHAIN_BENCH_STEPS, GPUCHAIN_BENCH_WARMUP,
GPUCHAIN_BENCH_THREADS; the model directory is GPUCHAIN_MINILM_DIR. It refuses to run unless
OpenBLAS is mapped into the process (GPUCHAIN_BENCH_ANY_BLAS=1 overrides);
GPUCHAIN_BENCH_TORCH_CONFIG=1 also prints torch.__config__.show(). The last line is
machine-readable: `minilm_step impl=torch … s_per_step=S median=M cpu_s_per_step=C`.

No `transformers` and no `safetensors` package: the file format is an 8-byte little-endian
header length, a JSON header (dtype, shape, data_offsets per tensor) and raw little-endian data.
"""

import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def env_int(name, default):
    v = os.environ.get(name)
    return default if v is None or v == "" else int(v)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            continue  # embeddings.position_ids (I64): the encoder does not read it
        start, end = meta["data_offsets"]
        arr = np.frombuffer(data, dtype="<f4", count=(end - start) // 4, offset=start)
        key = name[len("bert."):] if name.startswith("bert.") else name
        out[key] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
    return out


def blas_library():
    """The BLAS shared object this process has mapped (after a matmul has run)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(p)
            if "blas" in base or "lapack" in base:
                libs.add(os.path.realpath(p))
    return sorted(libs)


def matmul_gflops():
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    a @ b
    t = time.perf_counter()
    reps = 5
    for _ in range(reps):
        a @ b
    dt = (time.perf_counter() - t) / reps
    return 2 * 1024**3 / dt / 1e9


def main():
    batch = env_int("GPUCHAIN_BENCH_BATCH", 16)
    seq = env_int("GPUCHAIN_BENCH_SEQ", 64)
    steps = env_int("GPUCHAIN_BENCH_STEPS", 3)
    warmup = env_int("GPUCHAIN_BENCH_WARMUP", 1)
    threads = env_int("GPUCHAIN_BENCH_THREADS", os.cpu_count() or 1)
    model_dir = os.environ.get("GPUCHAIN_MINILM_DIR")
    if not model_dir:
        raise SystemExit("set GPUCHAIN_MINILM_DIR to the all-MiniLM-L6-v2 directory")
    torch.set_num_threads(threads)
    torch.manual_seed(1)

    gflops = matmul_gflops()
    blas = blas_library()
    if not any("openblas" in b for b in blas) and not os.environ.get("GPUCHAIN_BENCH_ANY_BLAS"):
        raise SystemExit(f"torch is not using OpenBLAS (mapped: {blas or 'none'}); "
                         "scripts/bench-torch selects it, or set GPUCHAIN_BENCH_ANY_BLAS=1")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, BLAS mapped: "
          f"{', '.join(blas) or 'none'}; 1024² fp32 matmul {gflops:.1f} GFLOP/s")
    if os.environ.get("GPUCHAIN_BENCH_TORCH_CONFIG"):
        print(torch.__config__.show())

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise SystemExit(f"hidden_act {cfg['hidden_act']!r} is not supported")
    w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    d = h // nh
    layers = cfg["num_hidden_layers"]
    eps = cfg.get("layer_norm_eps", 1e-12)
    vocab = cfg["vocab_size"]
    rank, alpha, classes = 8, 16.0, 2
    scale = alpha / rank
    targets = ("query", "value")

    bound = 1.0 / math.sqrt(h)
    params = {}
    for i in range(layers):
        for t in targets:
            a = torch.empty(rank, h).uniform_(-bound, bound)
            params[f"lora.{i}.{t}.a"] = a.requires_grad_()
            params[f"lora.{i}.{t}.b"] = torch.zeros(h, rank, requires_grad=True)
    params["head.weight"] = torch.empty(classes, h).uniform_(-bound, bound).requires_grad_()
    params["head.bias"] = torch.empty(classes).uniform_(-bound, bound).requires_grad_()
    opt = torch.optim.AdamW(
        list(params.values()), lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01
    )

    def ln(x, name):
        return F.layer_norm(x, (h,), w[f"{name}.weight"], w[f"{name}.bias"], eps)

    def forward(ids, mask):
        b, s = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:s]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = ln(x, "embeddings.LayerNorm")
        bias = (mask * 1e9 - 1e9).reshape(b, 1, 1, s)

        def heads(t):
            return t.reshape(b, s, nh, d).transpose(1, 2)

        for i in range(layers):
            p = f"encoder.layer.{i}"

            def lin(x, name):
                return F.linear(x, w[f"{p}.{name}.weight"], w[f"{p}.{name}.bias"])

            q = lin(x, "attention.self.query")
            k = lin(x, "attention.self.key")
            v = lin(x, "attention.self.value")
            if "query" in targets:
                q = q + F.linear(F.linear(x, params[f"lora.{i}.query.a"]),
                                 params[f"lora.{i}.query.b"]) * scale
            if "key" in targets:
                k = k + F.linear(F.linear(x, params[f"lora.{i}.key.a"]),
                                 params[f"lora.{i}.key.b"]) * scale
            if "value" in targets:
                v = v + F.linear(F.linear(x, params[f"lora.{i}.value.a"]),
                                 params[f"lora.{i}.value.b"]) * scale
            q, k, v = heads(q), heads(k), heads(v)
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d)) + bias
            probs = torch.softmax(scores, dim=-1)
            ctx = (probs @ v).transpose(1, 2).reshape(b, s, h)
            attn = ln(lin(ctx, "attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
            inter = F.gelu(lin(attn, "intermediate.dense"))
            x = ln(lin(inter, "output.dense") + attn, f"{p}.output.LayerNorm")
        m = mask.unsqueeze(2)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1.0)
        return F.linear(pooled, params["head.weight"], params["head.bias"])

    g = torch.Generator().manual_seed(7)
    # Ids from the real vocabulary (skipping the special tokens), full rows: no padding.
    ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq)
    labels = torch.arange(batch) % classes

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(ids, mask), labels)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(warmup):
        step()
    times = []
    cpu0 = time.process_time()
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    cpu = (time.process_time() - cpu0) / steps
    mean = sum(times) / len(times)
    print("per step (s): " + " ".join(f"{t:.3f}" for t in times))
    print(f"minilm_step impl=torch batch={batch} seq={seq} threads={torch.get_num_threads()} "
          f"steps={steps} s_per_step={mean:.4f} median={statistics.median(times):.4f} "
          f"cpu_s_per_step={cpu:.3f}")


if __name__ == "__main__":
    sys.exit(main())
