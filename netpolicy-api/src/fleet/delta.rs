//! Layer deltas (issue 68): a new layer as the changes from the layer it replaces. When
//! a policy edit gives a layer new content, the operator also writes the changes from
//! the layer it replaces, as a NodeNetworkRendering of its own named [`delta_name`] of
//! the new layer, with [`LayerDelta`] in `spec.delta`. An agent that holds the old layer
//! reads that small object instead of the new layer whole, and [`Joined::from_delta`]
//! checks the result against the new layer's content address before it is used: a
//! delta that does not lead to exactly the layer named is refused, and the agent reads
//! the layer whole.

use netpolicy_core::{
    fleet::{layer_name, layer_name_of},
    hash::Fnv1a,
    render::{RenderedDelta, RenderedSpec},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{JoinError, Joined};

/// The changes that lead from layer `from` to layer `to` (a `d-…` object's
/// `spec.delta`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LayerDelta {
    /// The layer the changes apply to (`l-<16 hex digits>`).
    pub from: String,
    /// The layer they lead to (`l-<16 hex digits>`).
    pub to: String,
    /// The changes, list by list.
    #[serde(flatten)]
    pub changes: RenderedDelta,
}

/// The name of the object holding the delta that leads to `layer`:
/// `d-<the layer's 16 hex digits>` (one delta a layer, from the layer it replaced).
pub fn delta_name(layer: &str) -> String {
    format!("d-{}", layer.strip_prefix("l-").unwrap_or(layer))
}

/// The delta leading to `layer` among `objects` (what listing [`delta_name`] of the
/// layer by its label gives): the agent's and a custom agent's one way to pick it.
pub fn delta_to<'a>(
    objects: impl IntoIterator<Item = &'a super::NodeNetworkRenderingSpec>,
    layer: &str,
) -> Option<&'a LayerDelta> {
    objects
        .into_iter()
        .find_map(|o| o.delta.as_ref().filter(|d| d.to == layer))
}

/// The content address of a layer's items ([`layer_name`] of their canonical text):
/// what the operator names a layer by, and what a layer built from a delta must have.
/// The text is hashed as it is written ([`Fnv1a`]), never held: an agent checks each
/// layer it builds from a delta (a 500-route layer is ~55 KB of text).
pub fn layer_address(rendered: &RenderedSpec) -> String {
    let mut h = Fnv1a::default();
    if serde_json::to_writer(&mut h, rendered).is_err() {
        // As the text it would have been (`unwrap_or_default` of no text).
        return layer_name("");
    }
    layer_name_of(h)
}

impl Joined {
    /// Layer `delta.to`, from the layer `delta.from` (`base`) and the changes.
    ///
    /// # Errors
    /// [`JoinError::Delta`] when `base` is another layer or is not a layer, when the
    /// changes do not fit its items, or when the result is not exactly layer
    /// `delta.to` (its content address differs): read the layer whole then.
    pub fn from_delta(delta: &LayerDelta, base: &Self) -> Result<Self, JoinError> {
        let bad = |message: String| JoinError::Delta {
            layer: delta.to.clone(),
            message,
        };
        if base.rendering != delta.from {
            return Err(bad(format!(
                "the delta is from {}, the layer given is {}",
                delta.from, base.rendering
            )));
        }
        if !base.layers.is_empty()
            || !base.probes.is_empty()
            || base.rollback_seconds.is_some()
            || !base.rendered.table_hard_sync.is_empty()
        {
            return Err(bad(format!("{} is not a layer", base.rendering)));
        }
        let rendered = base
            .rendered
            .with_delta(&delta.changes)
            .map_err(|e| bad(format!("applied to {}: {e}", delta.from)))?;
        let got = layer_address(&rendered);
        if got != delta.to {
            return Err(bad(format!(
                "applied to {}, it gives {got}, not {}",
                delta.from, delta.to
            )));
        }
        Ok(Self {
            rendering: delta.to.clone(),
            rendered,
            ..Self::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use netpolicy_core::{
        render::{SourceRef, SourcedSpec},
        spec::RouteSpec,
    };

    use super::*;

    fn layer(via7: &str) -> Joined {
        let routes = (0..50)
            .map(|i| SourcedSpec {
                item: RouteSpec {
                    to: format!("10.0.{i}.0/24"),
                    via: Some(if i == 7 { via7 } else { "192.0.2.1" }.into()),
                    ..Default::default()
                },
                sources: vec![SourceRef {
                    kind: "ClusterConfig".into(),
                    name: "default".into(),
                }],
            })
            .collect();
        let rendered = RenderedSpec {
            routes,
            ..Default::default()
        };
        Joined {
            rendering: layer_address(&rendered),
            rendered,
            ..Joined::default()
        }
    }

    fn delta(old: &Joined, new: &Joined) -> LayerDelta {
        LayerDelta {
            from: old.rendering.clone(),
            to: new.rendering.clone(),
            changes: old.rendered.delta_to(&new.rendered),
        }
    }

    /// A layer's address is hashed as its text is written: the name of the whole text
    /// (the names stored so far stay the same).
    #[test]
    fn a_layer_address_is_the_name_of_its_text() {
        for via in ["192.0.2.1", "192.0.2.2"] {
            let l = layer(via);
            let text = serde_json::to_string(&l.rendered).unwrap();
            assert_eq!(l.rendering, layer_name(&text));
        }
        assert_ne!(layer("192.0.2.1").rendering, layer("192.0.2.2").rendering);
        assert_eq!(
            layer_address(&RenderedSpec::default()),
            layer_name(&serde_json::to_string(&RenderedSpec::default()).unwrap())
        );
    }

    /// Among listed objects, only a delta to the layer asked for is picked.
    #[test]
    fn the_delta_to_a_layer_is_the_one_leading_to_it() {
        let (old, new, other) = (layer("192.0.2.1"), layer("192.0.2.2"), layer("192.0.2.3"));
        let object = |d: Option<LayerDelta>| super::super::NodeNetworkRenderingSpec {
            delta: d,
            ..Default::default()
        };
        let listed = [
            object(None),
            object(Some(delta(&old, &other))),
            object(Some(delta(&old, &new))),
        ];
        assert_eq!(delta_to(&listed, &new.rendering), Some(&delta(&old, &new)));
        assert_eq!(delta_to(&listed[..2], &new.rendering), None);
        assert_eq!(delta_to(&[], &new.rendering), None);
    }

    #[test]
    fn a_delta_gives_the_new_layer_exactly() {
        let (old, new) = (layer("192.0.2.1"), layer("192.0.2.2"));
        let d = delta(&old, &new);
        assert_eq!(d.changes.routes.added(), 1);
        assert_eq!(Joined::from_delta(&d, &old), Ok(new.clone()));
        assert_eq!(
            delta_name(&new.rendering),
            format!("d-{}", &new.rendering[2..])
        );
        // What is stored, read back.
        let text = serde_json::to_string(&d).unwrap();
        assert!(text.len() < 300, "{text}");
        let back: LayerDelta = serde_json::from_str(&text).unwrap();
        assert_eq!(Joined::from_delta(&back, &old), Ok(new));
    }

    #[test]
    fn a_delta_that_does_not_lead_to_its_layer_is_refused() {
        let (old, new) = (layer("192.0.2.1"), layer("192.0.2.2"));
        let other = layer("192.0.2.3");
        // From another layer than the one given.
        let e = Joined::from_delta(&delta(&other, &new), &old).unwrap_err();
        assert!(e.to_string().contains("the delta is from"), "{e}");
        // Changes that do not give the layer named (its content address differs).
        let mut d = delta(&old, &new);
        d.to = other.rendering.clone();
        let e = Joined::from_delta(&d, &old).unwrap_err();
        assert!(e.to_string().contains("it gives"), "{e}");
        // Changes that do not fit the items given.
        let mut d = delta(&old, &new);
        d.changes.routes.runs[0].from = 60;
        let e = Joined::from_delta(&d, &old).unwrap_err();
        assert!(
            e.to_string().contains("routes: the delta keeps items 60.."),
            "{e}"
        );
        // A rendering with probes is not a layer.
        let mut r = old.clone();
        r.rollback_seconds = Some(5);
        let e = Joined::from_delta(&delta(&old, &new), &r).unwrap_err();
        assert!(e.to_string().contains("is not a layer"), "{e}");
    }
}
