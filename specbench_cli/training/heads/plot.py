"""Training curves (loss; per-head top-1 / top-5) of the heads trainer."""

from __future__ import annotations

from pathlib import Path

from specbench_cli.atomic import atomic_write


def _smooth(ys: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y - (ys[i - window] if i >= window else 0.0)
        out.append(acc / min(i + 1, window))
    return out


def plot_curves(history: list[dict], path: Path, title: str) -> None:
    """PNG: left the losses (distill, reg, ce, g_adv, d_loss), right per-head top-1 (solid) and
    top-5 (dashed) accuracy; a moving average over ~2 % of the steps smooths batch noise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    steps = [h["step"] for h in history]
    window = max(1, len(history) // 50)
    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(11, 4))
    for key in ("loss", "distill", "reg", "ce", "g_adv", "d_loss"):
        ys = [h.get(key) for h in history]
        if all(isinstance(y, (int, float)) for y in ys):
            ax_l.plot(steps, _smooth(ys, window), label=key, linewidth=1)
    heads = sorted({k.split("_h")[1] for h in history for k in h if k.startswith("top1_h")}, key=int)
    for i, hd in enumerate(heads):
        color = f"C{i}"
        for key, style in ((f"top1_h{hd}", "-"), (f"top5_h{hd}", "--")):
            pts = [(h["step"], h[key]) for h in history if key in h]
            if pts:
                xs, ys = zip(*pts)
                ax_a.plot(xs, _smooth(list(ys), window), style, color=color, linewidth=1,
                          label=f"head {hd} {key[:4]}")
    ax_l.set_xlabel("step")
    ax_l.set_title("losses")
    ax_a.set_xlabel("step")
    ax_a.set_title("accuracy vs target (top-1 solid, top-5 dashed)")
    ax_a.set_ylim(0, 1)
    for ax in (ax_l, ax_a):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
