//! Text classification data: AG News CSV (`class,title,description`, classes 1–4) and JSONL
//! (`{"text": …, "label": …}`), tokenised once at load into fixed-length rows.

use std::path::Path;

use candle_core::{Device, Tensor};
use tokenizers::Tokenizer;

use super::{Batch, Dataset, Input};
use crate::error::{Result, TrainerError};

#[derive(Clone, Debug, PartialEq)]
pub struct TextExample {
    pub text: String,
    /// 0-based class.
    pub label: u32,
}

fn bad(path: &Path, line: usize, reason: impl Into<String>) -> TrainerError {
    TrainerError::BadData {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| TrainerError::io(path, e))
}

/// AG News: every non-empty line is `class,title,description` with RFC 4180 quoting and
/// class 1–4 (stored 0-based).
pub fn parse_ag_news_csv(path: &Path) -> Result<Vec<TextExample>> {
    let body = read(path)?;
    let mut out = Vec::new();
    for (k, line) in body.lines().enumerate() {
        let n = k + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields = split_csv_line(line).map_err(|r| bad(path, n, r))?;
        if fields.len() != 3 {
            return Err(bad(
                path,
                n,
                format!(
                    "expected 3 fields class,title,description, found {}",
                    fields.len()
                ),
            ));
        }
        let class: u32 = fields[0].trim().parse().map_err(|_| {
            bad(
                path,
                n,
                format!("class {:?} is not a number 1–4", fields[0]),
            )
        })?;
        if !(1..=4).contains(&class) {
            return Err(bad(path, n, format!("class {class} is outside 1–4")));
        }
        out.push(TextExample {
            text: format!("{}. {}", fields[1].trim(), fields[2].trim()),
            label: class - 1,
        });
    }
    if out.is_empty() {
        return Err(bad(path, 0, "no examples"));
    }
    Ok(out)
}

fn split_csv_line(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    quoted = false;
                    if !matches!(chars.peek(), None | Some(',')) {
                        return Err("text after a closing quote".into());
                    }
                }
            } else {
                cur.push(c);
            }
        } else if c == ',' {
            fields.push(std::mem::take(&mut cur));
            at_start = true;
            continue;
        } else if c == '"' && at_start {
            quoted = true;
        } else {
            cur.push(c);
        }
        at_start = false;
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(cur);
    Ok(fields)
}

#[derive(serde::Deserialize)]
struct JsonRow {
    text: String,
    label: i64,
}

/// JSONL: one `{"text": string, "label": 0..num_classes-1}` object per non-empty line.
pub fn parse_jsonl(path: &Path, num_classes: usize) -> Result<Vec<TextExample>> {
    parse_jsonl_text(path, &read(path)?, num_classes)
}

/// [`parse_jsonl`] of text already in memory (a file of a fetched dataset bundle); errors name
/// `path` and the line.
pub fn parse_jsonl_text(path: &Path, body: &str, num_classes: usize) -> Result<Vec<TextExample>> {
    let mut out = Vec::new();
    for (k, line) in body.lines().enumerate() {
        let n = k + 1;
        if line.trim().is_empty() {
            continue;
        }
        let row: JsonRow = serde_json::from_str(line).map_err(|e| {
            bad(
                path,
                n,
                format!("expected {{\"text\": …, \"label\": …}}: {e}"),
            )
        })?;
        if row.label < 0 || row.label >= num_classes as i64 {
            return Err(bad(
                path,
                n,
                format!(
                    "label {} is outside 0..{}",
                    row.label,
                    num_classes.saturating_sub(1)
                ),
            ));
        }
        out.push(TextExample {
            text: row.text,
            label: row.label as u32,
        });
    }
    if out.is_empty() {
        return Err(bad(path, 0, "no examples"));
    }
    Ok(out)
}

/// The JSONL form [`parse_jsonl`] reads: how a text job's examples travel in its data blobs.
pub fn to_jsonl(examples: &[TextExample]) -> Vec<u8> {
    let mut out = Vec::new();
    for ex in examples {
        let row = serde_json::json!({"text": ex.text, "label": ex.label});
        out.extend_from_slice(row.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// The `n` lower-cased words of `examples` that say most about the label (χ² of a word's
/// per-class counts against the class sizes; ties in byte order): a small encoder's
/// vocabulary. Plain frequency would fill it with "the" and "of", which say nothing of the
/// topic. Words split as the word tokenizer's pre-tokenizer splits letters and digits;
/// anything else becomes its unknown token.
pub fn word_vocabulary(examples: &[TextExample], n: usize) -> Vec<String> {
    let classes = examples
        .iter()
        .map(|e| e.label as usize + 1)
        .max()
        .unwrap_or(0);
    let mut counts: std::collections::HashMap<String, Vec<u64>> = std::collections::HashMap::new();
    let mut class_words = vec![0u64; classes];
    for ex in examples {
        for w in ex.text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !w.is_empty() {
                let c = counts
                    .entry(w.to_lowercase())
                    .or_insert_with(|| vec![0; classes]);
                c[ex.label as usize] += 1;
                class_words[ex.label as usize] += 1;
            }
        }
    }
    let all = class_words.iter().sum::<u64>().max(1) as f64;
    // Words seen fewer times than this are as likely noise as signal.
    const MIN_COUNT: u64 = 3;
    let mut scored: Vec<(f64, String)> = counts
        .into_iter()
        .filter(|(_, c)| c.iter().sum::<u64>() >= MIN_COUNT)
        .map(|(w, c)| {
            let total = c.iter().sum::<u64>() as f64;
            let chi2: f64 = c
                .iter()
                .zip(&class_words)
                .filter(|(_, k)| **k > 0)
                .map(|(&obs, &k)| {
                    let expected = total * k as f64 / all;
                    (obs as f64 - expected).powi(2) / expected
                })
                .sum();
            (chi2, w)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, w)| w).collect()
}

/// Pre-tokenised examples, each truncated or padded (id 0, mask 0) to `max_len`.
pub struct TextDataset {
    ids: Vec<u32>,
    mask: Vec<f32>,
    labels: Vec<u32>,
    max_len: usize,
    num_classes: usize,
}

impl TextDataset {
    pub fn tokenize(
        examples: &[TextExample],
        tokenizer: &Tokenizer,
        max_len: usize,
        num_classes: usize,
    ) -> Result<Self> {
        let mut ids = Vec::with_capacity(examples.len() * max_len);
        let mut mask = Vec::with_capacity(examples.len() * max_len);
        let mut labels = Vec::with_capacity(examples.len());
        for (i, ex) in examples.iter().enumerate() {
            if ex.label as usize >= num_classes {
                return Err(TrainerError::Model(format!(
                    "example {i} has label {} but the job has {num_classes} classes",
                    ex.label
                )));
            }
            let enc = tokenizer
                .encode(ex.text.as_str(), true)
                .map_err(|e| TrainerError::Model(format!("tokenising example {i}: {e}")))?;
            let toks = enc.get_ids();
            let n = toks.len().min(max_len);
            ids.extend_from_slice(&toks[..n]);
            ids.extend(std::iter::repeat_n(0, max_len - n));
            mask.extend(std::iter::repeat_n(1.0, n));
            mask.extend(std::iter::repeat_n(0.0, max_len - n));
            labels.push(ex.label);
        }
        Ok(Self {
            ids,
            mask,
            labels,
            max_len,
            num_classes,
        })
    }
}

impl Dataset for TextDataset {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn num_classes(&self) -> usize {
        self.num_classes
    }

    fn batch(&self, indices: &[usize], device: &Device) -> Result<Batch> {
        super::check_indices(indices, self.len())?;
        let l = self.max_len;
        let mut ids = Vec::with_capacity(indices.len() * l);
        let mut mask = Vec::with_capacity(indices.len() * l);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            ids.extend_from_slice(&self.ids[i * l..(i + 1) * l]);
            mask.extend_from_slice(&self.mask[i * l..(i + 1) * l]);
            labels.push(self.labels[i]);
        }
        let b = indices.len();
        Ok(Batch {
            input: Input::Tokens {
                ids: Tensor::from_vec(ids, (b, l), device)?,
                mask: Tensor::from_vec(mask, (b, l), device)?,
            },
            labels: Tensor::from_vec(labels, b, device)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        let f = split_csv_line(r#""3","Wall St. ""Bears""","x, y""#).unwrap();
        assert_eq!(f, vec!["3", r#"Wall St. "Bears""#, "x, y"]);
        assert!(split_csv_line(r#""3","open"#).is_err());
        assert!(split_csv_line(r#""3"x,"a","b""#).is_err());
    }
}
