//! A minimal PNG encoder for `report.html`'s large matrices: one
//! palette image (colour type 3, 8 bits a pixel), no filter, one zlib
//! stream — the chunks of the PNG specification (W3C, "Portable Network
//! Graphics (PNG) Specification (Third Edition)", sections 5.3 and
//! 11.2: IHDR, PLTE, IDAT, IEND, each with its CRC-32). A palette of a
//! few dozen colours over a million pixels compresses to tens of kB,
//! and the page stays one file (a `data:` URI).

use std::io::Write as _;

/// The PNG file signature (specification section 5.2).
const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// A `width` × `height` image whose pixels (row by row, one byte each)
/// index `palette` (at most 256 colours).
///
/// # Panics
/// When `pixels` is not `width × height` long or the palette is empty or
/// above 256 colours: the caller builds both.
pub fn indexed(width: u32, height: u32, palette: &[[u8; 3]], pixels: &[u8]) -> Vec<u8> {
    assert_eq!(pixels.len(), width as usize * height as usize);
    assert!((1..=256).contains(&palette.len()));
    let mut out = SIGNATURE.to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Bit depth 8, colour type 3 (palette), deflate, filter method 0,
    // no interlace.
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"PLTE", palette.concat().as_slice());
    // Each scanline starts with its filter type, 0 (none).
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    for row in pixels.chunks(width.max(1) as usize) {
        // Writing to a Vec cannot fail.
        let _ = z.write_all(&[0]);
        let _ = z.write_all(row);
    }
    let idat = z.finish().unwrap_or_default();
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// One chunk: length, type, data, CRC-32 of type and data.
fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    /// The chunks of a PNG: (type, data), each CRC checked.
    fn chunks(png: &[u8]) -> Vec<(String, Vec<u8>)> {
        assert_eq!(png[..8], SIGNATURE);
        let mut at = 8;
        let mut out = Vec::new();
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let kind = &png[at + 4..at + 8];
            let data = &png[at + 8..at + 8 + len];
            let mut crc = flate2::Crc::new();
            crc.update(kind);
            crc.update(data);
            let want = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc.sum(), want, "CRC of {kind:?}");
            out.push((String::from_utf8(kind.to_vec()).unwrap(), data.to_vec()));
            at += 12 + len;
        }
        out
    }

    #[test]
    fn a_palette_image_has_its_chunks_and_its_rows_inflate_back() {
        let palette = [[255, 255, 255], [0, 128, 0], [200, 0, 0]];
        let pixels = [0, 1, 2, 1, 1, 0];
        let png = indexed(3, 2, &palette, &pixels);
        let c = chunks(&png);
        let kinds: Vec<&str> = c.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["IHDR", "PLTE", "IDAT", "IEND"]);
        assert_eq!(c[0].1, [0, 0, 0, 3, 0, 0, 0, 2, 8, 3, 0, 0, 0]);
        assert_eq!(c[1].1, palette.concat());
        let mut rows = Vec::new();
        flate2::read::ZlibDecoder::new(&c[2].1[..])
            .read_to_end(&mut rows)
            .unwrap();
        assert_eq!(rows, [0, 0, 1, 2, 0, 1, 1, 0]);
    }
}
