//! Chat templates in `hearth template-worker`, as `hearth serve` renders them: a template
//! that doubles a string in a loop (within its fuel, toward a terabyte) fails its render with
//! an error naming its memory, the process that asked lives on, and the next render gets a
//! new worker; ordinary templates and their own errors come back as they do in the process.

use hearth_models::chat::{ChatMessage, ChatOptions, ChatTemplate};
use hearth_models::chat_sandbox::{confine, WORKER_MEMORY};

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

#[test]
#[cfg(unix)]
fn a_template_that_grows_without_end_fails_alone() {
    confine(
        env!("CARGO_BIN_EXE_hearth").into(),
        vec!["template-worker".into()],
    );
    let messages = [
        ChatMessage::new("system", "Be brief.\n\"quoted\" and \\ escaped"),
        ChatMessage::new("user", "Hello"),
    ];
    let options = ChatOptions {
        add_generation_prompt: true,
        ..ChatOptions::default()
    };
    let want = "<|im_start|>system\nBe brief.\n\"quoted\" and \\ escaped<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    let chatml = ChatTemplate::new(CHATML).unwrap();
    assert_eq!(chatml.render(&messages, &options).unwrap(), want);

    let doubling = "{% set ns = namespace(s='x') %}{% for i in range(48) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    let err = ChatTemplate::new(doubling)
        .unwrap()
        .render(&messages, &options)
        .unwrap_err()
        .to_string();
    let cap = format!("{} MiB of memory", WORKER_MEMORY >> 20);
    assert!(err.contains(&cap), "{err}");
    // A new worker takes the next render; a template's own error keeps its line.
    assert_eq!(chatml.render(&messages, &options).unwrap(), want);
    let raising = "line one\n{{ raise_exception('no system role here') }}";
    let err = ChatTemplate::new(raising)
        .unwrap()
        .render(&messages, &options)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no system role here") && err.contains('2'),
        "{err}"
    );
    let repeating = "{{ 'ab' * 4000000000 }}";
    let err = ChatTemplate::new(repeating)
        .unwrap()
        .render(&messages, &options)
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory") || err.contains("too large"), "{err}");
}
