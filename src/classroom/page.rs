//! The page: one self-contained HTML document compiled into the binary — inline style and
//! script, no font, image or script fetched from anywhere, so it works offline. It is drawn
//! entirely from the session's event stream; the only things put into it when it is served are
//! the session's control token (so only this page can drive the session) and the nonce that lets
//! its one script run under the page's Content-Security-Policy.

/// The document, with `{{CONTROL_TOKEN}}` and `{{NONCE}}` to fill in.
const PAGE: &str = include_str!("page.html");

/// The page for a session with `control` (its control token) and `nonce` (its script's nonce),
/// both lower-case hex.
pub(crate) fn render(control: &str, nonce: &str) -> String {
    PAGE.replace("{{CONTROL_TOKEN}}", control)
        .replace("{{NONCE}}", nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Self-contained: nothing is fetched from another place, and every placeholder is filled.
    #[test]
    fn the_page_fetches_nothing_and_carries_its_tokens() {
        let page = render(&"a".repeat(32), &"b".repeat(32));
        assert!(!page.contains("{{"), "a placeholder is left");
        // The SVG namespace is a name, not an address the browser fetches.
        let page = page.replace("\"http://www.w3.org/2000/svg\"", "SVG");
        assert!(page.contains(&format!("nonce=\"{}\"", "b".repeat(32))));
        assert!(page.contains(&"a".repeat(32)));
        for fetch in [
            "http://", "https://", "//cdn", "@import", "url(", "<link", "src=",
        ] {
            assert!(!page.contains(fetch), "the page fetches {fetch:?}");
        }
        assert_eq!(page.matches("<script").count(), 1);
    }
}
