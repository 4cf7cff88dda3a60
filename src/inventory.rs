//! Collects the device inventory through `verbs` into `engine`'s plain data.

use engine::fabric::gid::GidKind;
use engine::fabric::listing::{DeviceListing, GidListing, PortListing};

use std::fs::File;
use std::io::Write as _;

use engine::fabric::listing::{JsonLines, ListingWriter, Text};

use crate::exit::UsageError;

/// Runs `--list-devices` (`-d`, `-i`: one device, one port): text on stdout; JSON lines to the `--json` file,
/// or to stdout instead of the text when it is `-`.
///
/// # Errors
/// Device errors (unknown device or port: a usage error) and I/O errors.
pub fn run_list(
    (ib_dev, ib_port): (Option<&str>, Option<u8>),
    json: Option<&str>,
) -> anyhow::Result<()> {
    let devices = collect(ib_dev, ib_port).map_err(|e| match e {
        verbs::Error::NoSuchDevice { .. } => UsageError(format!("-d/--ib-dev: {e}")).into(),
        verbs::Error::NoSuchPort { .. } => UsageError(format!("-i/--ib-port: {e}")).into(),
        other => anyhow::Error::new(other),
    })?;
    let mut stdout = crate::output::Stdout;
    match json {
        Some("-") => JsonLines.write(&mut stdout, &devices)?,
        Some(path) => {
            // Create the file only after the inventory succeeded, so bad
            // input leaves nothing behind.
            Text.write(&mut stdout, &devices)?;
            let mut file = File::create(path)
                .map_err(|e| anyhow::anyhow!("cannot create --json file {path:?}: {e}"))?;
            JsonLines.write(&mut file, &devices)?;
            file.flush()?;
        }
        None => Text.write(&mut stdout, &devices)?,
    }
    Ok(())
}

/// Every device (or only `device`), every port (or only `port`), with their
/// valid GIDs.
///
/// # Errors
/// [`verbs::Error::NoSuchDevice`] (listing the devices that exist),
/// [`verbs::Error::NoDevices`], [`verbs::Error::NoSuchPort`], or a failing
/// query verb.
pub fn collect(device: Option<&str>, port: Option<u8>) -> Result<Vec<DeviceListing>, verbs::Error> {
    let names: Vec<String> = match device {
        Some(name) => vec![name.to_owned()],
        None => {
            let all = verbs::devices()?;
            if all.is_empty() {
                return Err(verbs::Error::no_devices());
            }
            all.into_iter().map(|d| d.name).collect()
        }
    };
    names.iter().map(|name| describe(name, port)).collect()
}

fn describe(name: &str, only_port: Option<u8>) -> Result<DeviceListing, verbs::Error> {
    let ctx = verbs::Context::open(name)?;
    let dev = ctx.query_device()?;
    let ports: Vec<u8> = match only_port {
        Some(p) => vec![p],
        None => (1..=dev.phys_port_cnt).collect(),
    };
    let gids = ctx.gid_table()?;
    let mut listed = Vec::with_capacity(ports.len());
    for p in ports {
        let attr = ctx.query_port(p)?;
        listed.push(PortListing {
            port: p,
            state: attr.state.to_string(),
            link_layer: attr.link_layer.to_string(),
            active_mtu: attr.active_mtu.bytes(),
            max_mtu: attr.max_mtu.bytes(),
            lid: attr.lid,
            lanes: engine::fabric::link::lanes(attr.active_width),
            speed: engine::fabric::link::lane_speed(attr.active_speed)
                .map(|(name, _)| name.to_owned()),
            rate_gbps: engine::fabric::link::width_speed_gbps(attr.active_width, attr.active_speed),
            gids: gids
                .iter()
                .filter(|g| g.port == p)
                .map(|g| GidListing::new(g.gid_index, g.gid.0, gid_kind(g.gid_type)))
                .collect(),
        });
    }
    Ok(DeviceListing {
        name: ctx.name().to_owned(),
        node_guid: dev.node_guid,
        fw_ver: dev.fw_ver,
        vendor_id: dev.vendor_id,
        ports: listed,
    })
}

/// Maps the device's GID type onto the engine's.
pub fn gid_kind(t: verbs::GidType) -> GidKind {
    match t {
        verbs::GidType::Ib => GidKind::Ib,
        verbs::GidType::RoceV1 => GidKind::RoceV1,
        verbs::GidType::RoceV2 => GidKind::RoceV2,
        verbs::GidType::Unknown(_) => GidKind::Unknown,
    }
}
