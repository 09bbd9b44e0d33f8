//! Job specs: the job file a client submits (`gpuchain job submit --spec job.toml`) with every
//! check `build` applies before anything reaches the chain, and a job offer's spec as a
//! provider or verifier turns it into the trainer's spec. The input is tried as both: the
//! file's text and an offer's CBOR spec.
//!
//! Properties: nothing panics; a spec built from an accepted file passes the protocol's own
//! checks, survives its CBOR round trip with the same hash, and gives a trainer spec that
//! validates.
#![no_main]

use gpuchain_node::roles::jobs::{FASHION_CNN_MODEL, JobBlobs, JobFile, train_spec};
use gpuchain_protocol::JobSpec;
use gpuchain_protocol::spec::ModelKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(file) = JobFile::parse(text)
    {
        let blobs = JobBlobs {
            model: FASHION_CNN_MODEL.to_vec(),
            train: b"train".to_vec(),
            eval: b"eval".to_vec(),
        };
        let extra = match (&file.model, &file.text) {
            (ModelKind::BertLora, text) => text.clone().unwrap_or_default().hyper_extra(),
            (ModelKind::FashionCnn, _) => Ok(Default::default()),
        };
        if let Ok(extra) = extra
            && let Ok(spec) = file.spec_for(&blobs, extra)
        {
            spec.check()
                .expect("a built spec passes the protocol's checks");
            let back = JobSpec::from_cbor(&spec.to_cbor()).expect("a built spec decodes");
            assert_eq!(back.spec_hash(), spec.spec_hash());
            train_spec(&back)
                .expect("a built spec has a trainer spec")
                .validate()
                .expect("a built spec's trainer spec validates");
        }
    }
    if let Ok(spec) = JobSpec::from_cbor(data)
        && spec.check().is_ok()
        && let Ok(ts) = train_spec(&spec)
    {
        // Providers and verifiers validate before training; neither may panic.
        let _ = ts.validate();
        let _ = ts.fingerprint();
    }
});
