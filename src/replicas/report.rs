//! The `replicas` report: the inputs, what the model predicted, what the run observed, and
//! the differences, assembled once every replica, caller and engine has been closed.

use serde::{Deserialize, Serialize};

use super::evidence::Evidence;
use super::inputs::ReplicasInputs;
use super::model::{self, Prediction};

/// The whole report of one `replicas` run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplicasReport {
    /// Always `"replicas"`.
    pub lab: String,
    /// The crate version that produced it.
    pub version: String,
    /// The inputs as run.
    pub inputs: ReplicasInputs,
    /// What the inputs predict.
    pub prediction: Prediction,
    /// What the run observed.
    pub evidence: Evidence,
    /// The observations that differ from the prediction, in words.
    pub mismatches: Vec<String>,
    /// Nothing failed and nothing differed.
    pub matches_model: bool,
    /// Why the run failed, in one line; absent when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl ReplicasReport {
    /// The report of `evidence`, checked against what `inputs` predict.
    pub fn assemble(inputs: ReplicasInputs, evidence: Evidence, failure: Option<String>) -> Self {
        let prediction = model::predict(&inputs);
        let mismatches = model::check(&prediction, &evidence);
        ReplicasReport {
            lab: "replicas".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            matches_model: failure.is_none() && mismatches.is_empty(),
            inputs,
            prediction,
            evidence,
            mismatches,
            failure,
        }
    }

    /// Why the run exits 1, in one line: its failure, or its first difference from the model.
    pub fn reason(&self) -> Option<String> {
        if let Some(failure) = &self.failure {
            return Some(failure.clone());
        }
        let first = self.mismatches.first()?;
        let more = match self.mismatches.len() {
            1 => String::new(),
            n => format!(" (and {} more in mismatches)", n - 1),
        };
        Some(format!(
            "observations differ from the replicas model: {first}{more}"
        ))
    }
}
