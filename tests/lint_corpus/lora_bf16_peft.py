"""LoRA fine-tuning of a bf16 base model: the base is frozen, the adapters train in fp32."""
import math

import torch
from datasets import load_dataset
from peft import LoraConfig, get_peft_model
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, get_cosine_schedule_with_warmup

base = "meta-llama/Llama-3.2-1B"
tok = AutoTokenizer.from_pretrained(base)
tok.pad_token = tok.eos_token
model = AutoModelForCausalLM.from_pretrained(base)
model = model.to(torch.bfloat16).cuda()
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                         task_type="CAUSAL_LM"))
model.print_trainable_parameters()

ds = load_dataset("tatsu-lab/alpaca", split="train").map(
    lambda ex: tok(ex["instruction"] + "\n" + ex["output"], truncation=True, max_length=512),
    remove_columns=["instruction", "input", "output", "text"],
)
split = ds.train_test_split(test_size=0.02, seed=0)
collate = DataCollatorForLanguageModeling(tok, mlm=False)
train_dl = DataLoader(split["train"], batch_size=8, shuffle=True, collate_fn=collate)
val_dl = DataLoader(split["test"], batch_size=16, collate_fn=collate)

optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0)
accum = 4
epochs = 2
steps = epochs * math.ceil(len(train_dl) / accum)
scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=100, num_training_steps=steps)

for epoch in range(epochs):
    model.train()
    for i, batch in enumerate(train_dl):
        batch = {k: v.cuda() for k, v in batch.items()}
        loss = model(**batch).loss / accum
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(train_dl):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        val = sum(model(**{k: v.cuda() for k, v in b.items()}).loss.item() for b in val_dl) / len(val_dl)
    print(f"epoch {epoch}: val loss {val:.4f} ppl {math.exp(val):.2f}")
    model.save_pretrained(f"out/lora-epoch{epoch}")
