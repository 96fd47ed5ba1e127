//! `file://` URIs as the protocols send them, turned into host paths; no other schemes, no path checks.

use std::path::PathBuf;

/// A `file://` URI's local path (`file:///a/b`, `file://localhost/a/b`), percent-decoded.
/// Other hosts, other schemes and a decoded NUL give `None`.
pub fn file_uri_to_path(uri: &str) -> Option<PathBuf> {
    let scheme = uri.get(..7)?;
    if !scheme.eq_ignore_ascii_case("file://") {
        return None;
    }
    let rest = &uri[7..];
    let path =
        if rest.starts_with('/') { rest } else { rest.strip_prefix("localhost").filter(|p| p.starts_with('/'))? };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    // The decoder keeps a malformed escape as it is; a path never holds one, so it is refused.
    let malformed = path
        .match_indices('%')
        .any(|(at, _)| path.as_bytes().get(at + 1..at + 3).is_none_or(|h| !h.iter().all(u8::is_ascii_hexdigit)));
    if malformed {
        return None;
    }
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(path).collect();
    if bytes.contains(&0) {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
    }
    #[cfg(not(unix))]
    {
        Some(PathBuf::from(String::from_utf8(bytes).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::file_uri_to_path;
    use std::path::PathBuf;

    #[test]
    fn file_uris() {
        assert_eq!(file_uri_to_path("file:///a/b%20c"), Some(PathBuf::from("/a/b c")));
        assert_eq!(file_uri_to_path("FILE:///a"), Some(PathBuf::from("/a")));
        assert_eq!(file_uri_to_path("file://localhost/a"), Some(PathBuf::from("/a")));
        assert_eq!(file_uri_to_path("file:///a?x#y"), Some(PathBuf::from("/a")));
        assert_eq!(file_uri_to_path("file://server/a"), None);
        assert_eq!(file_uri_to_path("https://x/a"), None);
        assert_eq!(file_uri_to_path("file:///a%00b"), None);
        assert_eq!(file_uri_to_path("file:///a%zz"), None);
        assert_eq!(file_uri_to_path("file:///a%2"), None);
        assert_eq!(file_uri_to_path("file:"), None);
    }
}
