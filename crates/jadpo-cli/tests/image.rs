//! The container image, for real: `deploy/image/build.sh` builds it with
//! `podman build` from `scratch`, its filesystem is exported
//! (`podman create` + `podman export`) and the binary run inside it with
//! `chroot`, as the image's user (containers cannot be started on our
//! machines). And the compose file and the Kubernetes example parse.
//! Without podman, root or Python's `yaml`, a test skips loudly, and fails
//! under `CI=true` (`.ci/run` installs them).

#[path = "support/process.rs"]
mod process;

use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_testing::process::Logged;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The image's filesystem, exported into a folder: removed with it.
struct Exported {
    dir: tempfile::TempDir,
    inspect: serde_json::Value,
}

fn build_and_export() -> Option<Exported> {
    if !has("podman") {
        jadpo_testing::skip::missing(
            "podman",
            "not on PATH",
            "install Debian's podman (`apt-get install podman`)",
        );
        return None;
    }
    if run(Command::new("id").arg("-u")).trim() != "0" {
        jadpo_testing::skip::missing("root", "chroot needs it", "run the suite as root");
        return None;
    }
    let tag = format!("localhost/jadpo-image-test:{}", std::process::id());
    let built = run(Command::new(repo().join("deploy/image/build.sh"))
        .env("BINARY", env!("CARGO_BIN_EXE_jadpo"))
        .env("TAG", &tag));
    assert_eq!(built.trim(), tag);
    let inspect: serde_json::Value =
        serde_json::from_str(&run(Command::new("podman").args(["image", "inspect", &tag]))).unwrap();
    let container = run(Command::new("podman").args(["create", &tag])).trim().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("image.tar");
    run(Command::new("podman").args(["export", "-o", tar.to_str().unwrap(), &container]));
    run(Command::new("podman").args(["rm", &container]));
    run(Command::new("podman").args(["rmi", &tag]));
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    run(Command::new("tar").args(["-x", "-f", tar.to_str().unwrap(), "-C", root.to_str().unwrap()]));
    std::fs::remove_file(&tar).unwrap();
    Some(Exported {
        dir,
        inspect: inspect[0].clone(),
    })
}

/// Every file of the exported image, relative to its root.
fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_image_holds_jadpo_alone_and_runs_dev_over_sqlite_in_data() {
    let Some(image) = build_and_export() else {
        return;
    };
    let root = image.dir.path().join("root");
    let config = &image.inspect["Config"];
    assert_eq!(config["User"], "10001:10001", "not root");
    assert_eq!(config["Entrypoint"][0], "/usr/local/bin/jadpo");
    assert_eq!(config["Cmd"][0], "serve");
    assert!(config["ExposedPorts"].get("7420/tcp").is_some(), "{config}");
    assert!(config["Volumes"].get("/data").is_some(), "{config}");
    let healthcheck = &image.inspect["Healthcheck"]["Test"];
    assert_eq!(healthcheck[1], "/usr/local/bin/jadpo", "{healthcheck}");
    assert_eq!(healthcheck[2], "healthcheck");
    let labels = &config["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert!(labels.get("org.opencontainers.image.source").is_some());

    // The binary, the loader and libraries it links, the user: nothing else.
    let all = files(&root);
    assert!(all.contains(&"usr/local/bin/jadpo".to_owned()), "{all:?}");
    for f in &all {
        assert!(
            f == "usr/local/bin/jadpo" || f.starts_with("lib") || f.starts_with("etc/") || f.starts_with("usr/lib"),
            "{f} in the image: {all:?}"
        );
    }
    assert!(!root.join("bin/sh").exists(), "no shell");

    let inside = |args: &[&str]| {
        let mut c = Command::new("chroot");
        c.arg("--userspec=10001:10001")
            .arg(&root)
            .arg("/usr/local/bin/jadpo")
            .args(args);
        c
    };
    let version = run(&mut inside(&["--version"]));
    assert_eq!(version.trim(), format!("jadpo {}", env!("CARGO_PKG_VERSION")));

    // `jadpo dev` over a SQLite file in /data, delivering to a provider
    // outside (the same network: chroot does not change it).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = rt.block_on(TestProvider::start());
    provider.set(Behaviour::Up);
    let app = format!(
        "event Paid {{ id: string }}\n\
         connection pay {{ base_url: \"{}\" }}\n\
         action charge(id: string) {{ call pay.post(\"/charges/{{id}}\", body: event) }}\n\
         subscriber charge {{ on: Paid  run: charge(event.id) }}\n",
        provider.url()
    );
    std::fs::write(root.join("data/app.jadpo"), app).unwrap();
    let mut dev = Logged::spawn(
        inside(&[
            "dev",
            "/data/app.jadpo",
            "--store",
            "sqlite:/data/jadpo.db",
            "--port",
            "0",
        ])
        .env_remove("RUST_LOG")
        .env_remove("JADPO_STORE"),
    );
    let port = dev.port("api.listening");
    assert!(process::get(port, "/healthz").contains("ok"), "{}", dev.text());
    let healthy = run(&mut inside(&[
        "healthcheck",
        "--url",
        &format!("http://127.0.0.1:{port}/healthz"),
    ]));
    assert!(healthy.contains("200"), "{healthy}");
    assert_eq!(process::post(port, "/events/Paid", r#"{"id":"p1"}"#), 202);
    process::wait_until("the provider called", || provider.calls() == 1);
    let (status, log) = dev.terminate();
    assert!(status.success(), "{log}");
    assert!(root.join("data/jadpo.db").exists(), "the store is in /data");
}

#[test]
fn the_compose_file_and_the_kubernetes_example_parse() {
    let python = "import json, sys, yaml; \
                  print(json.dumps([list(yaml.safe_load_all(open(p))) for p in sys.argv[1:]]))";
    let ok = Command::new("python3")
        .args(["-c", "import yaml"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        jadpo_testing::skip::missing(
            "Python's yaml",
            "python3 -c 'import yaml' failed",
            "install Debian's python3-yaml",
        );
        return;
    }
    let compose = repo().join("deploy/compose.yaml");
    let kubernetes = repo().join("deploy/kubernetes/jadpo.yaml");
    let parsed: serde_json::Value = serde_json::from_str(&run(Command::new("python3").args([
        "-c",
        python,
        compose.to_str().unwrap(),
        kubernetes.to_str().unwrap(),
    ])))
    .unwrap();
    let compose = &parsed[0][0];
    let jadpo = &compose["services"]["jadpo"];
    assert_eq!(jadpo["command"][0], "serve");
    assert!(jadpo["environment"]["JADPO_STORE"]
        .as_str()
        .unwrap()
        .starts_with("postgres://"));
    assert!(compose["services"].get("postgres").is_some());
    let kinds: Vec<&str> = parsed[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service"]);
    let container = &parsed[1][0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["env"][1]["valueFrom"]["secretKeyRef"]["key"], "api-token");
}
