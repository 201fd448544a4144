"""Spoofing countermeasure training: a squeeze-excitation ResNet on log spectrograms.

Modelled on ASVspoof countermeasure trainers: 1 s crops, log power spectrograms, an
SE-ResNet, a weighted cross-entropy between bona fide and spoofed speech (spoofs
outnumber bona fide trials), mixed precision on the GPU, and the equal error rate (EER)
on a development set.

The audio is synthetic and deterministic: bona fide utterances are voiced speech with
natural jitter and a full band; spoofed ones come from a "vocoder" that band-limits the
signal, flattens the jitter and leaves a faint frame-rate buzz.  Runs anywhere:

    python antispoofing_seresnet.py --steps 3 --device cpu
"""

import os
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.backends.cudnn.benchmark = True

SAMPLE_RATE = 16000
BONAFIDE, SPOOF = 1, 0


class SyntheticASVspoof(Dataset):
    """Bona fide and spoofed utterances as log power spectrograms (1, freq, frames)."""

    def __init__(self, n_utterances, seconds=1.0, spoof_fraction=0.8, seed=0):
        self.n_utterances = n_utterances
        self.n_samples = int(seconds * SAMPLE_RATE)
        self.spoof_fraction = spoof_fraction
        self.seed = seed
        self.n_fft = 256
        self.hop = 128
        self.window = torch.hann_window(self.n_fft)

    def __len__(self):
        return self.n_utterances

    def utterance(self, spoofed, rng):
        t = np.arange(self.n_samples) / SAMPLE_RATE
        f0 = rng.uniform(90.0, 250.0)
        jitter = 0.008 if spoofed else 0.02
        f0_track = f0 * (1.0 + jitter * np.cumsum(rng.standard_normal(self.n_samples)) / np.sqrt(self.n_samples))
        phase = 2 * np.pi * np.cumsum(f0_track) / SAMPLE_RATE
        top = rng.uniform(5000.0, 7500.0) if spoofed else SAMPLE_RATE / 2
        wave = np.zeros(self.n_samples)
        for h in range(1, int(top / f0)):
            wave += np.sin(h * phase + rng.uniform(0, 2 * np.pi)) / h
        if spoofed:
            wave += 0.003 * np.sign(np.sin(2 * np.pi * 100.0 * t))  # frame-rate buzz
        wave += rng.uniform(0.01, 0.05) * rng.standard_normal(self.n_samples)
        return torch.from_numpy(wave.astype(np.float32))

    def __getitem__(self, index):
        rng = np.random.default_rng([self.seed, index])
        spoofed = rng.random() < self.spoof_fraction
        wave = self.utterance(spoofed, rng)
        spec = torch.stft(wave, self.n_fft, self.hop, window=self.window, return_complex=True).abs() ** 2
        return torch.log(spec + 1e-7).unsqueeze(0), SPOOF if spoofed else BONAFIDE


class SEBlock(nn.Module):
    """Squeeze-excitation: reweight channels by a gate computed from their global average."""

    def __init__(self, channels, reduction=8):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        gate = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean(dim=(2, 3))))))
        return x * gate[:, :, None, None]


class SEBasicBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.se = SEBlock(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.se(self.bn2(self.conv2(out)))
        return F.relu(out + self.shortcut(x))


class SEResNet(nn.Module):
    def __init__(self, channels=(16, 32, 64), blocks_per_stage=2, n_classes=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                  nn.ReLU())
        stages = []
        in_ch = channels[0]
        for i, ch in enumerate(channels):
            for b in range(blocks_per_stage):
                stages.append(SEBasicBlock(in_ch, ch, stride=2 if (b == 0 and i > 0) else 1))
                in_ch = ch
        self.stages = nn.Sequential(*stages)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(channels[-1], n_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.classifier(self.dropout(x.mean(dim=(2, 3))))


def equal_error_rate(bonafide_scores, spoof_scores):
    """The error rate where false acceptances (spoofs) equal false rejections (bona fide)."""
    thresholds = np.sort(np.concatenate([bonafide_scores, spoof_scores]))
    frr = np.array([(bonafide_scores < t).mean() for t in thresholds])
    far = np.array([(spoof_scores >= t).mean() for t in thresholds])
    i = np.argmin(np.abs(frr - far))
    return (frr[i] + far[i]) / 2


def evaluate(model, loader, device):
    model.eval()
    scores, labels = [], []
    with torch.no_grad():
        for specs, target in loader:
            specs = specs.to(device, non_blocking=True)
            logits = model(specs)
            scores.append(F.softmax(logits.float(), dim=1)[:, BONAFIDE].cpu())
            labels.append(target)
    scores = torch.cat(scores).numpy()
    labels = torch.cat(labels).numpy()
    return equal_error_rate(scores[labels == BONAFIDE], scores[labels == SPOOF])


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 64 on CUDA, 8 on the CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=500, help="optimizer steps between EER evaluations")
    return parser.parse_args()


def main():
    args = parse_args()
    device = args.device
    batch_size = args.batch_size or (64 if device.startswith("cuda") else 8)
    use_amp = device.startswith("cuda")
    torch.manual_seed(args.seed)

    train_set = SyntheticASVspoof(20000, seed=args.seed)
    dev_set = SyntheticASVspoof(96, seed=args.seed + 1)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=min(8, os.cpu_count() or 1), drop_last=True, pin_memory=True, persistent_workers=True)
    dev_loader = DataLoader(dev_set, batch_size=batch_size, shuffle=False, num_workers=min(8, os.cpu_count() or 1), pin_memory=True, persistent_workers=True)

    model = SEResNet().to(device)
    class_weights = torch.tensor([0.1, 0.9]).to(device)  # spoof, bona fide: spoofs outnumber bona fide
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4, fused=torch.device(device).type == "cuda")
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)

    step = 0
    while step < args.steps:
        model.train()
        for specs, labels in train_loader:
            specs = specs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            with torch.cuda.amp.autocast(enabled=use_amp):
                logits = model(specs)
                loss = F.cross_entropy(logits, labels, weight=class_weights)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            torch.cuda.empty_cache()
            step += 1
            print(f"step {step} loss {loss.item():.4f}")
            if step % args.eval_every == 0:
                print(f"step {step} dev EER {100 * evaluate(model, dev_loader, device):.2f}%")
                model.train()
            if step >= args.steps:
                break
    print(f"final dev EER {100 * evaluate(model, dev_loader, device):.2f}%")


if __name__ == "__main__":
    main()
