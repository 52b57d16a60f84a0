"""Causal running mean and variance normalisation of log-mel, inside the lip-sync network (so in its ONNX graph).

Each band's mean and second moment are followed by an exponential moving average (time constant `tau` frames)
that starts from the training set's statistics and is carried between calls in the model's recurrent state, so
a stream normalises exactly as training did, one 10 ms hop or a whole file at a time. The features the network
sees are mapped back onto the training statistics, mel' = (mel - mean_t) / std_t * train_std + train_mean: a
speaker's or microphone's steady spectral tilt and level are taken out within seconds.

For one call of T frames the moving average is closed-form (no loop in the graph):
    m_t = (1-a)^(t+1) * (m_-1 + a * sum_{k<=t} (1-a)^-(k+1) x_k),      a = 1 / tau
computed with one cumulative sum. The weights grow as e^(T/tau): callers step at most MAX_FRAMES frames per call
(bridge/audio/lipsync.py splits longer input), far from float32's limit.
The state row holds [mean - train_mean (40), second moment of (x - train_mean) - train_var (40), zeros]: a zero
state is the training statistics.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

MAX_FRAMES = 1024


class RunningNorm(nn.Module):
    def __init__(self, mean: np.ndarray, std: np.ndarray, tau: float):
        super().__init__()
        self.bands = len(mean)
        self.register_buffer("norm_mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("norm_var", torch.tensor(np.asarray(std) ** 2, dtype=torch.float32))
        self.register_buffer("norm_log_keep", torch.tensor(float(np.log1p(-1.0 / tau)), dtype=torch.float32))
        self.register_buffer("norm_rate", torch.tensor(1.0 / tau, dtype=torch.float32))

    def forward(self, mel: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mel (B, T, bands), row (B, width) -> normalised mel (B, T, bands), new row (B, width)."""
        n = self.bands
        x = mel - self.norm_mean
        m0 = row[:, None, :n]
        s0 = row[:, None, n:2 * n] + self.norm_var
        k = torch.cumsum(torch.ones_like(mel[0, :, :1]), dim=0)[None]  # (1, T, 1): 1, 2, ... T
        grow = torch.exp(-k * self.norm_log_keep)  # (1-a)^-(k)
        shrink = torch.exp(k * self.norm_log_keep)
        mean = shrink * (m0 + self.norm_rate * torch.cumsum(x * grow, dim=1))
        second = shrink * (s0 + self.norm_rate * torch.cumsum(x * x * grow, dim=1))
        var = torch.clamp(second - mean * mean, min=1e-2)
        out = (x - mean) * torch.rsqrt(var) * torch.sqrt(self.norm_var) + self.norm_mean
        new_row = torch.cat([mean[:, -1], second[:, -1] - self.norm_var, row[:, 2 * n:]], dim=-1)
        return out, new_row


def reference(mel: np.ndarray, mean: np.ndarray, std: np.ndarray, tau: float) -> np.ndarray:
    """The same normalisation frame by frame in numpy (float64), from the training statistics: the check."""
    a = 1.0 / tau
    m, s = np.zeros_like(mean, dtype=np.float64), np.asarray(std, np.float64) ** 2
    out = np.empty(mel.shape, np.float64)
    for t, frame in enumerate(mel.astype(np.float64)):
        x = frame - mean
        m, s = (1 - a) * m + a * x, (1 - a) * s + a * x * x
        out[t] = (x - m) / np.sqrt(np.maximum(s - m * m, 1e-2)) * std + mean
    return out.astype(np.float32)
