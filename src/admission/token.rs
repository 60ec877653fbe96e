//! The run token: a fresh random value per policy run that the run's own callers present in the
//! `lab-token` header. A request without it — another local process that found the port, a
//! browser, a scanner — is refused before admission and leaves no trace in the pools, the
//! ledger or the model.

use std::fmt;

/// The header that carries the run token.
pub(crate) const TOKEN_HEADER: &str = "lab-token";

/// A 128-bit random token, from the operating system's randomness (via `getrandom`).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RunToken([u8; 16]);

impl RunToken {
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0; 16];
        getrandom::fill(&mut bytes)?;
        Ok(RunToken(bytes))
    }

    /// The token as the header value the run's callers send: 32 lower-case hex digits.
    pub(crate) fn header_value(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `presented` (a header value, if any) is this token. Every byte is compared, so
    /// the time taken does not tell a guesser how much of a guess was right.
    pub(crate) fn admits(&self, presented: Option<&[u8]>) -> bool {
        let expected = self.header_value();
        let Some(presented) = presented.filter(|p| p.len() == expected.len()) else {
            return false;
        };
        let differences = expected.bytes().zip(presented).map(|(a, b)| a ^ b);
        differences.fold(0, |acc, d| acc | d) == 0
    }
}

impl fmt::Debug for RunToken {
    /// Never prints the token itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunToken(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_admits_itself_and_nothing_else() {
        let token = RunToken::generate().expect("the OS has randomness");
        let other = RunToken::generate().expect("the OS has randomness");
        assert_ne!(token, other, "two fresh tokens differ");
        let value = token.header_value();
        assert_eq!(value.len(), 32);
        assert!(token.admits(Some(value.as_bytes())));
        assert!(!token.admits(None));
        assert!(!token.admits(Some(b"")));
        assert!(!token.admits(Some(other.header_value().as_bytes())));
        assert!(!token.admits(Some(&value.as_bytes()[..31])));
        assert!(
            !format!("{token:?}").contains(&value),
            "Debug hides the token"
        );
    }

    #[test]
    fn the_header_value_is_exact_lower_case_hex() {
        let token = RunToken([0xab; 16]);
        assert_eq!(token.header_value(), "ab".repeat(16));
        assert!(!token.admits(Some("AB".repeat(16).as_bytes())));
    }
}
