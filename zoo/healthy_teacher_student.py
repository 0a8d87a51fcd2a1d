"""Two training phases in one script: fit a teacher, then distil a smaller student from it.

Phase 1 trains a wide teacher on a smooth regression target until its MSE is about 1e-3. Phase
2 builds a small student and a new optimizer and trains the student on the teacher's outputs,
starting from an MSE of about 10 (its random init against targets of scale 3). The student's
first losses are four orders of magnitude above the teacher's last ones: a new phase, not a
divergence.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def fit(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor,
        steps: int, name: str) -> None:
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (128,))
        loss = F.mse_loss(model(x[idx]), target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"{name} step {step} mse {loss.item():.5f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher-steps", type=int, default=200)
    p.add_argument("--student-steps", type=int, default=150)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.rand(2048, 4) * 2 - 1
    y = 3 * torch.sin(2 * x[:, :1]) * torch.cos(x[:, 1:2]) + x[:, 2:3] ** 2

    teacher = nn.Sequential(nn.Linear(4, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
    fit(teacher, torch.optim.Adam(teacher.parameters(), lr=3e-3), x, y, args.teacher_steps, "teacher")

    with torch.no_grad():
        soft = teacher(x)
    student = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    nn.init.normal_(student[2].weight, std=2.0)  # a wide init: the student starts far off
    fit(student, torch.optim.Adam(student.parameters(), lr=1e-2), x, soft, args.student_steps, "student")
    if args.save:
        torch.save({**{f"teacher.{k}": v for k, v in teacher.state_dict().items()},
                    **{f"student.{k}": v for k, v in student.state_dict().items()}}, args.save)


if __name__ == "__main__":
    main()
