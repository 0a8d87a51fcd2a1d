"""The same accumulation loop with the step budget computed like the schedule: the healthy twin of schedule_unfinished_accumulation.

`max_train_steps = epochs * ceil(len(loader) / accum)`, the number of optimizer steps the loop
really takes: the run ends when the warmup-decay schedule reaches 0.

traindoc-expect:
"""

from schedule_unfinished_accumulation import main

if __name__ == "__main__":
    main(budget_from_ceil=True)
