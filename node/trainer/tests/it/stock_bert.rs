//! Our encoder against candle-transformers' stock `BertModel` (an implementation we did not
//! write), on the tiny random config and on the real all-MiniLM-L6-v2 weights.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use gpuchain_trainer::data::{Dataset, Input, TextDataset, TextExample};
use gpuchain_trainer::job::tiny_config;
use gpuchain_trainer::model::bert::{BertEncoder, load_tokenizer, minilm_dir};

/// Max |difference| of the hidden states, relative to their largest magnitude (at least 1).
fn compare(
    ours: &BertEncoder,
    stock: &BertModel,
    ids: &Tensor,
    mask: &Tensor,
    fused_ln: bool,
) -> f32 {
    let a = ours.forward(ids, mask, None, fused_ln).unwrap();
    let b = stock
        .forward(ids, &ids.zeros_like().unwrap(), Some(mask))
        .unwrap();
    assert_eq!(a.dims(), b.dims());
    let max_abs = |t: &Tensor| {
        t.abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    let scale = max_abs(&b).max(1.0);
    let d = max_abs(&(a - b).unwrap());
    println!("max |hidden state| {scale:.2}, max |difference| {d:.2e}");
    d / scale
}

#[test]
fn tiny_encoder_matches_candle_transformers() {
    let dev = Device::Cpu;
    let cfg = tiny_config(2, 32, 2, 64, 16);
    let ours = BertEncoder::tiny_random(cfg.clone(), 11, &dev).unwrap();
    let stock_cfg = Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        intermediate_size: cfg.intermediate_size,
        max_position_embeddings: cfg.max_position_embeddings,
        type_vocab_size: cfg.type_vocab_size,
        layer_norm_eps: cfg.layer_norm_eps,
        ..Config::default()
    };
    let vb = VarBuilder::from_tensors(ours.weights().clone(), DType::F32, &dev);
    let stock = BertModel::load(vb, &stock_cfg).unwrap();
    let ids = Tensor::new(
        &[[5u32, 17, 300, 2, 9, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 8]],
        &dev,
    )
    .unwrap();
    let mask = Tensor::new(
        &[
            [1f32, 1., 1., 1., 1., 0., 0., 0.],
            [1., 1., 1., 1., 1., 1., 1., 1.],
        ],
        &dev,
    )
    .unwrap();
    let d = compare(&ours, &stock, &ids, &mask, false);
    println!("tiny BERT: relative difference vs candle-transformers: {d:.2e}");
    assert!(d < 1e-5, "{d}");
}

#[test]
fn minilm_encoder_matches_candle_transformers() {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        println!(
            "note: skipping, no MiniLM weights at {} (run scripts/setup)",
            dir.display()
        );
        return;
    }
    let dev = Device::Cpu;
    let ours = Arc::new(BertEncoder::load(&dir, &dev).unwrap());
    let cfg: Config =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let stock = BertModel::load(
        VarBuilder::from_buffered_safetensors(bytes, DType::F32, &dev).unwrap(),
        &cfg,
    )
    .unwrap();
    let tok = load_tokenizer(&dir.join("tokenizer.json")).unwrap();
    let ex = [
        "Oil prices rose on Tuesday as supply worries grew.",
        "The team won the championship.",
    ]
    .map(|t| TextExample {
        text: t.into(),
        label: 0,
    });
    let data = TextDataset::tokenize(&ex, &tok, 20, 4).unwrap();
    let b = data.batch(&[0, 1], &dev).unwrap();
    let Input::Tokens { ids, mask } = &b.input else {
        unreachable!()
    };
    // With candle's fused LayerNorm swapped in, the rest of our forward is the stock one.
    let same_ln = compare(&ours, &stock, ids, mask, true);
    println!("MiniLM, fused LayerNorm: relative difference vs candle-transformers: {same_ln:.2e}");
    assert!(same_ln < 1e-5, "{same_ln}");
    // Our primitive LayerNorm adds only float rounding to that.
    let d = compare(&ours, &stock, ids, mask, false);
    println!("MiniLM, our LayerNorm: relative difference vs candle-transformers: {d:.2e}");
    assert!(d < 1e-5, "{d}");
}
