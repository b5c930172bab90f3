"""Notebook 00's first live figure: move the input's shift and scale; LayerNorm's output stays put."""
from __future__ import annotations

import ipywidgets as widgets
import torch

from ..figures import color, live_figure
from ..norms import layer_norm
from ..panel import Panel, register_panel

__all__ = ["first_slider_panel", "shifted_token"]


def shifted_token(shift: float, scale: float, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random token x, then scale * x + shift; returns (the moved token, its LayerNorm)."""
    if scale <= 0:
        raise ValueError(f"scale must be > 0 (got {scale}): LayerNorm is invariant to positive scaling only; "
                         "a negative scale flips the sign of the output")
    x = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    moved = scale * x + shift
    return moved, layer_norm(moved)


@register_panel()
def first_slider_panel(d: int = 16) -> Panel:
    """Sliders for shift and scale driving two bar traces: the token as given, and after LayerNorm."""
    fig = live_figure("One token before and after LayerNorm", "feature index k", "value", height=340)
    moved_bars = fig.add_bar(name="input x (moved)", marker_color=color(0)).data[-1]
    normed_bars = fig.add_bar(name="LayerNorm(x)", marker_color=color(1)).data[-1]
    controls = {
        "shift": widgets.FloatSlider(value=0.0, min=-20.0, max=20.0, step=0.5, description="shift b"),
        "scale": widgets.FloatSlider(value=1.0, min=0.1, max=10.0, step=0.1, description="scale a"),
    }
    readout = widgets.HTML()

    def update(shift: float, scale: float) -> None:
        moved, normed = shifted_token(shift, scale, d)
        with fig.batch_update():
            moved_bars.x = normed_bars.x = list(range(d))
            moved_bars.y = moved.tolist()
            normed_bars.y = normed.tolist()
        readout.value = (f"input mean {moved.mean():.2f}, std {moved.std(unbiased=False):.2f} &nbsp;|&nbsp; "
                         f"output mean {normed.mean():.2f}, std {normed.std(unbiased=False):.2f}")

    return Panel(controls, [readout, fig], update, title="Move the sliders: the input moves, the output does not")
