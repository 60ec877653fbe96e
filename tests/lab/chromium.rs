//! The crate's one headless Chromium: every check that needs a browser runs in one session, the
//! WebDriver client's own and the pictures' (`picture.rs`) first, then the classroom page
//! following the instructor's guide (`classroom_page.rs`). A browser's start and first page
//! take about as much CPU as the pictures' checks after them, and two browsers at once on a
//! two-core machine take longer than one after the other (measured here: one session for both
//! took about 2 s less CPU and 1.5 s less time than a session each).

use crate::common::webdriver::{Browser, skip_without_browser};
use crate::{classroom_page, picture};

/// The pictures, then the page, in one Chromium session; then it quits. Its name holds both
/// files' names, so `cargo test --test lab -- classroom_page picture` still selects it.
#[tokio::test]
async fn picture_then_classroom_page_in_one_browser() {
    if skip_without_browser("picture_then_classroom_page_in_one_browser") {
        return;
    }
    let browser = Browser::start().await.expect("Chromium starts");
    picture::the_webdriver_client_works_and_pictures_are_legible(&browser).await;
    classroom_page::the_page_follows_the_instructors_guide(browser).await;
}
