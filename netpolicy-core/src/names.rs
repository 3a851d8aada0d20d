//! Kubernetes' rules for names, label keys and label values, so that input the API
//! server would refuse is refused here first, with the reason (`netpolicy plan`
//! checks every object it reads, and every name it would generate).

/// A DNS-1123 subdomain (names of Nodes and custom resources): at most 253 characters,
/// dot-separated labels of lowercase letters, digits and `-`, each starting and ending
/// with a letter or digit.
///
/// # Errors
/// Why `s` is not one.
pub fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 253 {
        return Err(format!(
            "is {} characters long; at most 253 are allowed",
            s.len()
        ));
    }
    if s.split('.').all(is_label) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a valid name: lowercase letters, digits, '-' and '.', starting and \
             ending with a letter or digit (RFC 1123 subdomain)"
        ))
    }
}

/// A DNS-1123 label (names of Namespaces): at most 63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit.
///
/// # Errors
/// Why `s` is not one.
pub fn dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err(format!(
            "is {} characters long; at most 63 are allowed",
            s.len()
        ));
    }
    if is_label(s) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a valid name: lowercase letters, digits and '-', starting and \
             ending with a letter or digit (RFC 1123 label)"
        ))
    }
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63
/// letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit.
///
/// # Errors
/// Why `k` is not one.
pub fn label_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix).is_ok() && is_segment(name),
        None => is_segment(k),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{k:?} is not a valid label key ([prefix/]name, name at most 63 characters of \
             letters, digits, '-', '_', '.')"
        ))
    }
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_`, `.`, starting and
/// ending with a letter or digit.
///
/// # Errors
/// Why `v` is not one.
pub fn label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_segment(v) {
        Ok(())
    } else {
        Err(format!(
            "{v:?} is not a valid label value (at most 63 characters of letters, digits, \
             '-', '_', '.', starting and ending with a letter or digit)"
        ))
    }
}

fn is_label(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn is_segment(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_api_server_refuses_are_refused() {
        assert!(dns_subdomain("edge-a1.example").is_ok());
        for bad in ["", "Edge", "a_b", "-a", "a-", "a..b", &"a".repeat(254)] {
            assert!(dns_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(dns_label("c-m-abc").is_ok());
        for bad in ["a.b", &"a".repeat(64), "A"] {
            assert!(dns_label(bad).is_err(), "{bad:?}");
        }
        assert!(label_key("topology.kubernetes.io/zone").is_ok());
        assert!(label_key("Role_1").is_ok());
        for bad in ["a/b/c", "/x", "Example.com/x", &"k".repeat(64), "-x"] {
            assert!(label_key(bad).is_err(), "{bad:?}");
        }
        assert!(label_value("").is_ok());
        assert!(label_value("v1.2_x-Y").is_ok());
        for bad in ["a b", "-a", &"v".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad:?}");
        }
    }
}
