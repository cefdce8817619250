"""The small model the main job converts: a CNN/MLP mix that uses every module torch_dnn supports so far.
The tests use it too."""
import torch


class SmallNet(torch.nn.Module):
    def __init__(self, channels: int = 8, classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.inplace_relu = torch.nn.ReLU(inplace=True)
        self.acts = torch.nn.ModuleList([
            torch.nn.ReLU(), torch.nn.ReLU6(), torch.nn.Hardtanh(-2, 2), torch.nn.LeakyReLU(0.1), torch.nn.ELU(0.5),
            torch.nn.GELU(), torch.nn.GELU("tanh"), torch.nn.SiLU(), torch.nn.Sigmoid(), torch.nn.Tanh(),
            torch.nn.Softplus(2.0, 10.0), torch.nn.Mish(), torch.nn.Hardswish(), torch.nn.Hardsigmoid(),
        ])
        self.fc = torch.nn.Linear(channels * 4 * 4, classes)
        self.softmax = torch.nn.Softmax(dim=1)
        self.log_softmax = torch.nn.LogSoftmax(dim=1)

    def forward(self, x):
        h = self.inplace_relu(self.bn(self.conv(x)))
        for a in self.acts:
            h = h + 0.1 * a(h)
        h = torch.nn.functional.adaptive_avg_pool2d(h, 4).flatten(1)
        z = self.fc(h)
        return self.softmax(z) + self.log_softmax(z)
