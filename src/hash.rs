//! Content hashes: SHA-256 of bytes and its lowercase hex. Nothing else.

use sha2::{Digest, Sha256};

/// A SHA-256 of a file's bytes.
pub type Sha = [u8; 32];

pub fn sha256(bytes: &[u8]) -> Sha {
    Sha256::digest(bytes).into()
}

/// Lowercase hex of a hash.
pub fn hex(sha: &Sha) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for byte in sha {
        out.push(DIGITS[(byte >> 4) as usize] as char);
        out.push(DIGITS[(byte & 0xf) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_of_a_known_hash() {
        assert_eq!(
            super::hex(&super::sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
