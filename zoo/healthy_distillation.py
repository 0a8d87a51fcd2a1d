"""Distillation in a Hugging Face Trainer whose teacher runs under torch.no_grad(): no finding.

The `DistillationTrainer` of distill_teacher_with_grad.py (a `Trainer` subclass mixing the
student's cross-entropy with the KL divergence to a teacher's softened logits), with the
teacher's call in `compute_loss` wrapped in `torch.no_grad()`, as it should be: the teacher
gets no gradient and the backward runs through the student only.

traindoc-expect:
"""

from distill_teacher_with_grad import main

if __name__ == "__main__":
    main(detach=True)
