//! Kubernetes label selectors, with Kubernetes' semantics.
//!
//! | requirement | matches a node when |
//! |---|---|
//! | `matchLabels: {k: v}` | label `k` is present with value `v` |
//! | `In [v...]` | label `k` is present with one of the values |
//! | `NotIn [v...]` | label `k` is absent, or present with none of the values |
//! | `Exists` | label `k` is present (any value) |
//! | `DoesNotExist` | label `k` is absent |
//!
//! All requirements must hold; a selector with none matches every node.

use std::collections::BTreeMap;

#[cfg(feature = "serde")]
use crate::{error::Result, spec::LabelSelector, validate::Problems};

/// A node's labels.
pub type Labels = BTreeMap<String, String>;

/// Labels a selector can be matched against: a [`Labels`] map, or any other form that
/// looks a value up by its key (the merge engine keeps nodes' labels as shared strings).
///
/// # Examples
/// ```
/// use netpolicy_core::selector::{LabelLookup, Labels};
///
/// let labels = Labels::from([("zone".to_string(), "a".to_string())]);
/// assert_eq!(labels.label("zone"), Some("a"));
/// assert_eq!(labels.label("rack"), None);
/// ```
pub trait LabelLookup {
    /// The value of label `key`, when the label is present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<L: LabelLookup + ?Sized> LabelLookup for &L {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

/// One requirement of a validated [`Selector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// `key` is present with exactly `value` (from `matchLabels`).
    Equals {
        /// Label key.
        key: String,
        /// Required value.
        value: String,
    },
    /// `key` is present with one of `values` (sorted, deduplicated).
    In {
        /// Label key.
        key: String,
        /// Allowed values.
        values: Vec<String>,
    },
    /// `key` is absent or has none of `values`.
    NotIn {
        /// Label key.
        key: String,
        /// Excluded values.
        values: Vec<String>,
    },
    /// `key` is present.
    Exists {
        /// Label key.
        key: String,
    },
    /// `key` is absent.
    DoesNotExist {
        /// Label key.
        key: String,
    },
}

impl Requirement {
    /// Whether `labels` satisfy the requirement.
    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        let search =
            |values: &[String], v: &str| values.binary_search_by(|x| x.as_str().cmp(v)).is_ok();
        match self {
            Self::Equals { key, value } => labels.label(key) == Some(value.as_str()),
            Self::In { key, values } => labels.label(key).is_some_and(|v| search(values, v)),
            Self::NotIn { key, values } => labels.label(key).is_none_or(|v| !search(values, v)),
            Self::Exists { key } => labels.label(key).is_some(),
            Self::DoesNotExist { key } => labels.label(key).is_none(),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        match self {
            Self::Equals { key, .. }
            | Self::In { key, .. }
            | Self::NotIn { key, .. }
            | Self::Exists { key }
            | Self::DoesNotExist { key } => key,
        }
    }
}

/// A validated label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches every node.
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no node: what an invalid policy selects, so that
    /// its items land nowhere (one `In` requirement with no values).
    pub fn nothing() -> Self {
        Self {
            requirements: vec![Requirement::In {
                key: String::new(),
                values: Vec::new(),
            }],
        }
    }

    /// A selector from requirements (all must hold).
    pub fn from_requirements(requirements: Vec<Requirement>) -> Self {
        Self { requirements }
    }

    /// The requirements.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the selector has no requirements and so matches every node.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    ///
    /// # Examples
    /// ```
    /// use netpolicy_core::{selector::Labels, spec::{LabelSelector, LabelSelectorRequirement}};
    ///
    /// let sel = LabelSelector {
    ///     match_expressions: vec![LabelSelectorRequirement {
    ///         key: "zone".into(), operator: "NotIn".into(), values: vec!["a".into()],
    ///     }],
    ///     ..Default::default()
    /// }
    /// .validate("spec.nodeSelector")
    /// .unwrap();
    /// assert!(sel.matches(&Labels::new())); // NotIn matches an absent label
    /// assert!(!sel.matches(&Labels::from([("zone".into(), "a".into())])));
    /// ```
    pub fn matches<L: LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[cfg(feature = "serde")]
impl LabelSelector {
    /// Validates the selector. `path` names it in errors (`spec.nodeSelector`).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for bad keys or values, an unknown operator, `In`/`NotIn`
    /// without values, `Exists`/`DoesNotExist` with values, or a field a label selector
    /// does not have (a plain label map where a selector belongs).
    pub fn validate(&self, path: &str) -> Result<Selector> {
        let mut p = Problems::default();
        let mut reqs = Vec::new();
        for k in &self.unknown_fields.0 {
            p.push(
                format!("{path}.{k}"),
                format!(
                    "not a field of a label selector (matchLabels, matchExpressions); a plain \
                     label map belongs under matchLabels: {{matchLabels: {{{k}: ...}}}}"
                ),
            );
        }
        for (k, v) in &self.match_labels {
            let at = format!("{path}.matchLabels.{k}");
            check_key(k, &at, &mut p);
            check_value(v, &at, &mut p);
            reqs.push(Requirement::Equals {
                key: k.clone(),
                value: v.clone(),
            });
        }
        for (i, e) in self.match_expressions.iter().enumerate() {
            let at = format!("{path}.matchExpressions[{i}]");
            check_key(&e.key, &format!("{at}.key"), &mut p);
            let mut values = e.values.clone();
            for (j, v) in values.iter().enumerate() {
                check_value(v, &format!("{at}.values[{j}]"), &mut p);
            }
            values.sort_unstable();
            values.dedup();
            let key = e.key.clone();
            let needs_values = match e.operator.as_str() {
                "In" => {
                    reqs.push(Requirement::In { key, values });
                    true
                }
                "NotIn" => {
                    reqs.push(Requirement::NotIn { key, values });
                    true
                }
                "Exists" => {
                    reqs.push(Requirement::Exists { key });
                    false
                }
                "DoesNotExist" => {
                    reqs.push(Requirement::DoesNotExist { key });
                    false
                }
                other => {
                    p.push(
                        format!("{at}.operator"),
                        format!(
                            "{other:?} is not an operator; use In, NotIn, Exists or DoesNotExist"
                        ),
                    );
                    continue;
                }
            };
            if needs_values && e.values.is_empty() {
                p.push(
                    format!("{at}.values"),
                    format!("operator {} needs at least one value", e.operator),
                );
            } else if !needs_values && !e.values.is_empty() {
                p.push(
                    format!("{at}.values"),
                    format!("operator {} takes no values", e.operator),
                );
            }
        }
        p.finish(Selector { requirements: reqs })
    }
}

#[cfg(feature = "serde")]
fn check_key(k: &str, path: &str, p: &mut Problems) {
    if let Err(e) = crate::names::label_key(k) {
        p.push(path, e);
    }
}

#[cfg(feature = "serde")]
fn check_value(v: &str, path: &str, p: &mut Problems) {
    if let Err(e) = crate::names::label_value(v) {
        p.push(path, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn sel(exprs: Vec<LabelSelectorRequirement>) -> Selector {
        LabelSelector {
            match_expressions: exprs,
            ..Default::default()
        }
        .validate("s")
        .unwrap()
    }

    #[test]
    fn an_empty_selector_matches_every_node() {
        let s = LabelSelector::default().validate("s").unwrap();
        assert!(s.matches(&Labels::new()));
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let node = labels(&[("zone", "a"), ("role", "edge")]);
        let bare = Labels::new();
        let cases = [
            (expr("zone", "In", &["a", "b"]), true, false),
            (expr("zone", "In", &["c"]), false, false),
            (expr("zone", "NotIn", &["b"]), true, true),
            (expr("zone", "NotIn", &["a"]), false, true),
            (expr("role", "Exists", &[]), true, false),
            (expr("role", "DoesNotExist", &[]), false, true),
        ];
        for (e, on_node, on_bare) in cases {
            let s = sel(vec![e.clone()]);
            assert_eq!(s.matches(&node), on_node, "{e:?} on labelled node");
            assert_eq!(s.matches(&bare), on_bare, "{e:?} on unlabelled node");
        }
        let both = LabelSelector {
            match_labels: [("zone".into(), "a".into())].into(),
            match_expressions: vec![expr("role", "In", &["core"])],
            ..LabelSelector::default()
        }
        .validate("s")
        .unwrap();
        assert!(!both.matches(&node), "all requirements must hold");
    }

    #[test]
    fn bad_selectors_name_the_field() {
        let e = LabelSelector {
            match_labels: [("bad key!".into(), "x".into())].into(),
            match_expressions: vec![
                expr("zone", "Within", &["a"]),
                expr("zone", "In", &[]),
                expr("zone", "Exists", &["a"]),
            ],
            ..LabelSelector::default()
        }
        .validate("spec.nodeSelector")
        .unwrap_err();
        let paths: Vec<&str> = e.field_errors().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.nodeSelector.matchLabels.bad key!",
                "spec.nodeSelector.matchExpressions[0].operator",
                "spec.nodeSelector.matchExpressions[1].values",
                "spec.nodeSelector.matchExpressions[2].values",
            ]
        );
    }

    #[test]
    fn prefixed_keys_are_accepted() {
        let s = LabelSelector {
            match_labels: [("topology.kubernetes.io/zone".into(), "eu-1a".into())].into(),
            ..Default::default()
        }
        .validate("s")
        .unwrap();
        assert!(s.matches(&labels(&[("topology.kubernetes.io/zone", "eu-1a")])));
    }

    #[test]
    fn a_plain_label_map_where_a_selector_belongs_is_refused_and_named() {
        let sel: LabelSelector =
            serde_json::from_value(serde_json::json!({"role": "edge", "zone": "a"})).unwrap();
        let e = sel.validate("spec.nodeSelector").unwrap_err();
        let fields: Vec<&str> = e.field_errors().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(fields, ["spec.nodeSelector.role", "spec.nodeSelector.zone"]);
        assert!(e.to_string().contains("matchLabels"), "{e}");
        // Unknown keys are never written back out.
        assert_eq!(serde_json::to_string(&sel).unwrap(), "{}");
    }

    #[test]
    fn the_nothing_selector_matches_no_node() {
        let n = Selector::nothing();
        assert!(!n.matches(&Labels::new()));
        assert!(!n.matches(&labels(&[("", "")])));
        assert!(!n.is_everything());
    }
}
