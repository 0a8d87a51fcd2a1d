import json
import logging
import os
import random

import numpy as np
import torch
from sklearn.metrics import f1_score
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from tqdm import tqdm, trange
from transformers import BertForSequenceClassification, BertTokenizer, get_linear_schedule_with_warmup

logger = logging.getLogger(__name__)


class Config:
    model_name = "bert-base-uncased"
    max_seq_length = 128
    train_batch_size = 16
    eval_batch_size = 64
    learning_rate = 3e-5
    num_train_epochs = 4
    warmup_proportion = 0.1
    gradient_accumulation_steps = 2
    max_grad_norm = 1.0
    patience = 2
    output_dir = "outputs/bert"
    fp16 = True
    seed = 13


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def load_examples(path, tokenizer, cfg):
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    enc = tokenizer([r["text"] for r in rows], padding="max_length", truncation=True,
                    max_length=cfg.max_seq_length, return_tensors="pt")
    labels = torch.tensor([r["label"] for r in rows], dtype=torch.long)
    return TensorDataset(enc["input_ids"], enc["attention_mask"], labels)


def evaluate(model, dataset, cfg, device):
    loader = DataLoader(dataset, sampler=SequentialSampler(dataset), batch_size=cfg.eval_batch_size)
    model.eval()
    preds, golds, eval_loss, n = [], [], 0.0, 0
    for batch in tqdm(loader, desc="Evaluating"):
        input_ids, attention_mask, labels = (t.to(device) for t in batch)
        with torch.no_grad():
            outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        eval_loss += outputs.loss.mean().item()
        n += 1
        preds.append(outputs.logits.argmax(-1).cpu().numpy())
        golds.append(labels.cpu().numpy())
    preds, golds = np.concatenate(preds), np.concatenate(golds)
    return {"loss": eval_loss / max(n, 1), "f1": f1_score(golds, preds, average="macro")}


def train(cfg):
    set_seed(cfg.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = BertTokenizer.from_pretrained(cfg.model_name)
    model = BertForSequenceClassification.from_pretrained(cfg.model_name, num_labels=3).to(device)
    train_set = load_examples("data/train.jsonl", tokenizer, cfg)
    dev_set = load_examples("data/dev.jsonl", tokenizer, cfg)
    train_loader = DataLoader(train_set, sampler=RandomSampler(train_set), batch_size=cfg.train_batch_size)

    t_total = len(train_loader) // cfg.gradient_accumulation_steps * cfg.num_train_epochs
    no_decay = ["bias", "LayerNorm.weight"]
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=cfg.learning_rate, eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_proportion * t_total), t_total)
    scaler = torch.cuda.amp.GradScaler(enabled=cfg.fp16)

    os.makedirs(cfg.output_dir, exist_ok=True)
    best_f1, bad_epochs, global_step = -1.0, 0, 0
    model.zero_grad()
    for epoch in trange(cfg.num_train_epochs, desc="Epoch"):
        model.train()
        tr_loss = 0.0
        for step, batch in enumerate(tqdm(train_loader, desc="Iteration")):
            input_ids, attention_mask, labels = (t.to(device) for t in batch)
            with torch.cuda.amp.autocast(enabled=cfg.fp16):
                outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
                loss = outputs.loss
            if cfg.gradient_accumulation_steps > 1:
                loss = loss / cfg.gradient_accumulation_steps
            scaler.scale(loss).backward()
            tr_loss += loss.item()
            if (step + 1) % cfg.gradient_accumulation_steps == 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                model.zero_grad()
                global_step += 1

        metrics = evaluate(model, dev_set, cfg, device)
        logger.info("epoch %d: train loss %.4f dev %s", epoch, tr_loss / len(train_loader), metrics)
        if metrics["f1"] > best_f1:
            best_f1, bad_epochs = metrics["f1"], 0
            model.save_pretrained(cfg.output_dir)
            tokenizer.save_pretrained(cfg.output_dir)
            torch.save({"epoch": epoch, "f1": best_f1}, os.path.join(cfg.output_dir, "best_metrics.pt"))
        else:
            bad_epochs += 1
            if bad_epochs >= cfg.patience:
                logger.info("early stopping at epoch %d", epoch)
                break
    return best_f1


if __name__ == "__main__":
    print(train(Config()))
