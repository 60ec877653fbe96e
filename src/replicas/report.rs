//! The `replicas` report: the inputs, what the model predicted, what the run observed, and
//! the differences, assembled once every replica, caller and engine has been closed.

use serde::{Deserialize, Serialize};

use super::evidence::ReplicasEvidence;
use super::inputs::ReplicasInputs;
use super::model::{self, CountedAt, Dependency, OverAdmission, Prediction};

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
    pub evidence: ReplicasEvidence,
    /// Every time more requests were inside work sections at once than the limit, with whose
    /// lease had lapsed and why: expected during the pause and with own permits, a fault
    /// otherwise. Reported whether or not the run failed.
    #[serde(default)]
    pub over_admitted: Vec<OverAdmission>,
    /// With global permits: the shared dependency's account of the effects it accepted and
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<Dependency>,
    /// The observations that differ from the prediction, in words.
    pub mismatches: Vec<String>,
    /// Nothing failed, nothing differed, and no over-admission came that the model did not
    /// predict.
    pub matches_model: bool,
    /// Why the run failed, in one line; absent when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl OverAdmission {
    /// What it was, in one sentence.
    pub(crate) fn sentence(&self) -> String {
        let when = match self.when {
            CountedAt::AfterRequests => "once every request was decided",
            CountedAt::DuringPause => "during the pause",
        };
        let mut text = format!(
            "over-admission: {} requests inside work sections at once under a limit of {} {when} \
             ({})",
            self.inside.len(),
            self.limit,
            self.inside.join(" ")
        );
        for lapsed in &self.lapsed {
            text.push_str(&format!(
                "; Redis no longer named {} a holder, {}",
                lapsed.holder,
                lapsed.why()
            ));
            if let Some(ms) = lapsed.worked_on_ms {
                text.push_str(&format!(
                    ", and its work went on for {ms:.0} ms after the run heard of it"
                ));
            }
            if let Some(late) = &lapsed.late_effect {
                text.push_str(&format!("; {}", late_effect(late)));
            }
        }
        if let Some(why) = &self.why {
            text.push_str(&format!(": {why}"));
        }
        text
    }
}

/// What the dependency did with a holder's last write, in words.
pub(crate) fn late_effect(effect: &crate::redis_pool::Effect) -> String {
    let (holder, token, slot) = (&effect.holder, effect.fence.token, effect.fence.slot);
    match (effect.accepted, effect.newest > token) {
        (false, _) => format!(
            "the dependency refused {holder}'s last write (token {token}, slot {slot}): it had \
             accepted the newer token {} for that slot",
            effect.newest
        ),
        (true, true) => format!(
            "the dependency ACCEPTED {holder}'s last write (token {token}, slot {slot}) although \
             it had accepted the newer token {} for that slot",
            effect.newest
        ),
        (true, false) => format!(
            "the dependency accepted {holder}'s last write (token {token}, slot {slot}): it had \
             no newer token on record for that slot"
        ),
    }
}

impl ReplicasReport {
    /// The report of `evidence`, checked against what `inputs` predict.
    pub(crate) fn assemble(
        inputs: ReplicasInputs,
        evidence: ReplicasEvidence,
        failure: Option<String>,
    ) -> Self {
        let prediction = model::predict(&inputs);
        let mismatches = model::check(&prediction, &evidence);
        let over_admitted = model::over_admitted(&inputs, &evidence);
        let effects = evidence.engine.as_ref().and_then(|e| e.effects.as_deref());
        let dependency = effects.map(Dependency::of);
        let mut report = ReplicasReport {
            dependency,
            over_admitted,
            lab: "replicas".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            matches_model: false,
            inputs,
            prediction,
            evidence,
            mismatches,
            failure,
        };
        report.matches_model = report.failure.is_none()
            && report.mismatches.is_empty()
            && report.unpredicted_over_admission().is_none();
        report
    }

    /// With global permits, the first over-admission the model did not predict: one once the
    /// requests were decided, or one during the pause where a live holder's lease lapsed too.
    fn unpredicted_over_admission(&self) -> Option<&OverAdmission> {
        let unpredicted = |o: &&OverAdmission| match o.when {
            CountedAt::AfterRequests => true,
            CountedAt::DuringPause => o.lapsed.iter().any(|lapsed| !lapsed.paused),
        };
        let global = self.inputs.global.is_global();
        self.over_admitted
            .iter()
            .find(unpredicted)
            .filter(|_| global)
    }

    /// Why the run exits 1, in one line: what went wrong first. An over-admission the model
    /// did not predict comes before anything later (a failure after it is added); otherwise
    /// the run's failure, or its first difference from the model.
    pub fn reason(&self) -> Option<String> {
        if let Some(over) = self.unpredicted_over_admission() {
            return Some(match &self.failure {
                Some(failure) => format!("{}; then the run failed: {failure}", over.sentence()),
                None => over.sentence(),
            });
        }
        self.failure.clone().or_else(|| {
            let first = self.mismatches.first()?;
            let more = match self.mismatches.len() {
                1 => String::new(),
                n => format!(" (and {} more in mismatches)", n - 1),
            };
            Some(format!(
                "observations differ from the replicas model: {first}{more}"
            ))
        })
    }
}
