"""Speaker-verification training: a ResNet speaker encoder with an additive angular margin loss.

Modelled on VoxCeleb-style trainers: 2 s crops of speech, reverberation by convolution
with a room impulse response plus additive noise, 40-dimensional log mel filterbanks,
a thin ResNet with statistics pooling into a 128-dimensional embedding, and the
AAM-softmax (ArcFace) loss over the training speakers.

The audio is synthetic and deterministic (each utterance is generated from its index):
every speaker has its own pitch and formants, so the loss goes down as the encoder learns
them.  Runs anywhere:

    python speaker_verification.py --steps 3 --device cpu
"""

import os
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
import scipy.signal

torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("high")

SAMPLE_RATE = 16000


def mel_filterbank(n_mels, n_fft, sample_rate):
    """Triangular filters spaced on the mel scale (HTK formula), shape (n_mels, n_fft // 2 + 1)."""
    def hz_to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def mel_to_hz(mel):
        return 700.0 * (10 ** (mel / 2595.0) - 1.0)

    mels = np.linspace(hz_to_mel(20.0), hz_to_mel(sample_rate / 2), n_mels + 2)
    bins = np.floor((n_fft + 1) * mel_to_hz(mels) / sample_rate).astype(int)
    fb = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(1, n_mels + 1):
        left, centre, right = bins[m - 1], bins[m], bins[m + 1]
        for k in range(left, centre):
            fb[m - 1, k] = (k - left) / max(centre - left, 1)
        for k in range(centre, right):
            fb[m - 1, k] = (right - k) / max(right - centre, 1)
    return torch.from_numpy(fb)


class SyntheticVoxCeleb(Dataset):
    """Reverberant, noisy utterances from `n_speakers` synthetic voices, as log mel filterbanks."""

    def __init__(self, n_utterances, n_speakers, seconds=2.0, rir_seconds=0.4, n_mels=40, seed=0):
        self.n_utterances = n_utterances
        self.n_speakers = n_speakers
        self.n_samples = int(seconds * SAMPLE_RATE)
        self.rir_samples = int(rir_seconds * SAMPLE_RATE)
        self.seed = seed
        self.n_fft = 512
        self.hop = 160
        self.window = torch.hann_window(400)
        self.fbank = mel_filterbank(n_mels, self.n_fft, SAMPLE_RATE)
        voices = np.random.default_rng(seed)
        self.pitch = voices.uniform(90.0, 260.0, n_speakers)
        self.formants = voices.uniform([300.0, 900.0, 2000.0], [900.0, 2200.0, 3400.0], (n_speakers, 3))

    def __len__(self):
        return self.n_utterances

    def speak(self, speaker, rng):
        t = np.arange(self.n_samples) / SAMPLE_RATE
        f0 = self.pitch[speaker] * (1.0 + 0.03 * np.sin(2 * np.pi * rng.uniform(2, 6) * t))
        phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
        wave = np.zeros(self.n_samples)
        for h in range(1, 16):
            freq = h * self.pitch[speaker]
            gain = sum(np.exp(-((freq - f) / 250.0) ** 2) for f in self.formants[speaker])
            wave += (gain + 0.05) / h * np.sin(h * phase + rng.uniform(0, 2 * np.pi))
        syllables = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 2 * np.pi)) ** 2
        return (wave * syllables).astype(np.float32)

    def reverberate(self, wave, rng):
        decay = np.exp(-np.arange(self.rir_samples) / (rng.uniform(0.05, 0.3) * SAMPLE_RATE / 6.9))
        rir = (rng.standard_normal(self.rir_samples) * decay).astype(np.float32)
        rir[0] = 1.0
        rir /= np.sqrt(np.sum(rir ** 2))
        return scipy.signal.fftconvolve(wave, rir)[: len(wave)]

    def add_noise(self, wave, rng):
        snr_db = rng.uniform(5.0, 20.0)
        noise = rng.standard_normal(len(wave)).astype(np.float32)
        scale = np.sqrt(np.mean(wave ** 2) / (np.mean(noise ** 2) * 10 ** (snr_db / 10)))
        return wave + scale * noise

    def __getitem__(self, index):
        rng = np.random.default_rng([self.seed, index])
        speaker = index % self.n_speakers
        wave = self.add_noise(self.reverberate(self.speak(speaker, rng), rng), rng)
        spec = torch.stft(torch.from_numpy(wave), self.n_fft, self.hop, win_length=400, window=self.window,
                          return_complex=True).abs() ** 2
        feats = torch.log(self.fbank @ spec + 1e-6)
        feats = feats - feats.mean(dim=1, keepdim=True)  # cepstral mean normalisation
        return feats.unsqueeze(0), speaker


class BasicBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ThinResNet(nn.Module):
    """A thin ResNet over (batch, 1, mels, frames) with mean and standard-deviation pooling."""

    def __init__(self, n_mels=40, channels=(16, 32, 64, 128), embedding_dim=128):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels[0], 3, 1, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                  nn.ReLU())
        layers = []
        in_ch = channels[0]
        for i, ch in enumerate(channels):
            layers.append(BasicBlock(in_ch, ch, stride=1 if i == 0 else 2))
            in_ch = ch
        self.layers = nn.Sequential(*layers)
        freq_out = math.ceil(n_mels / 2 ** (len(channels) - 1))
        self.embedding = nn.Linear(2 * channels[-1] * freq_out, embedding_dim)

    def forward(self, x):
        x = self.layers(self.stem(x))
        x = x.flatten(1, 2)  # (batch, channels * freq, frames)
        stats = torch.cat([x.mean(dim=2), x.std(dim=2)], dim=1)
        return self.embedding(stats)


class AAMSoftmax(nn.Module):
    """Additive angular margin softmax: cos(θ + m) for the true speaker, scaled by s."""

    def __init__(self, embedding_dim, n_classes, margin=0.2, scale=30.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_classes, embedding_dim) * 0.01)
        self.margin = margin
        self.scale = scale

    def forward(self, embeddings, labels):
        cosine = F.linear(F.normalize(embeddings), F.normalize(self.weight)).clamp(-1 + 1e-7, 1 - 1e-7)
        theta = torch.acos(cosine)
        target = F.one_hot(labels, cosine.size(1)).bool()
        logits = self.scale * torch.where(target, torch.cos(theta + self.margin), cosine)
        loss = F.cross_entropy(logits, labels)
        accuracy = (cosine.argmax(dim=1) == labels).float().mean()
        return loss, accuracy


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 128 on CUDA, 8 on the CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--speakers", type=int, default=40)
    parser.add_argument("--utterances", type=int, default=4000)
    return parser.parse_args()


def main():
    args = parse_args()
    device = args.device
    batch_size = args.batch_size or (128 if device.startswith("cuda") else 8)
    torch.manual_seed(args.seed)

    train_set = SyntheticVoxCeleb(args.utterances, args.speakers, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=min(8, os.cpu_count() or 1), persistent_workers=True, pin_memory=True)

    model = ThinResNet().to(device)
    criterion = AAMSoftmax(128, args.speakers).to(device)
    optimizer = torch.optim.Adam(list(model.parameters()) + list(criterion.parameters()), lr=args.lr,
                                 weight_decay=2e-5,
                                 fused=torch.device(device).type == "cuda")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.97)

    step = 0
    epoch = 0
    while step < args.steps:
        model.train()
        total_loss = 0
        batches = 0
        for feats, labels in train_loader:
            feats = feats.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            embeddings = model(feats)
            loss, accuracy = criterion(embeddings, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.detach()
            batches += 1
            step += 1
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} acc {accuracy.item():.3f}")
            if step >= args.steps:
                break
        scheduler.step()
        print(f"epoch {epoch} mean loss {total_loss.item() / batches:.4f}")
        epoch += 1


if __name__ == "__main__":
    main()
