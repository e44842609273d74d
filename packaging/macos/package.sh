#!/usr/bin/env bash
# Builds Hearth.app and a signed, notarized DMG. Runs on macOS (Apple silicon or Intel) with:
# Rust, the Vulkan SDK (LunarG's: MoltenVK, the Vulkan loader, shaderc; set VULKAN_SDK to its
# macOS folder), Xcode's command-line tools, librsvg (rsvg-convert), and a Developer ID
# Application certificate in the keychain.
#
#   IDENTITY="Developer ID Application: NAME (TEAMID)" \
#   NOTARY_PROFILE=hearth-notary \      # made once: xcrun notarytool store-credentials
#   packaging/macos/package.sh
#
# Hearth finds MoltenVK through the Vulkan loader as a portability driver: the instance
# enables VK_KHR_portability_enumeration when the loader offers it (kernels/src/vk/instance.rs)
# and devices enable VK_KHR_portability_subset. The bundle carries the loader and MoltenVK in
# Contents/Frameworks and points the loader at MoltenVK's manifest in Contents/Resources.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
: "${VULKAN_SDK:?set VULKAN_SDK to the Vulkan SDK's macOS folder}"
: "${IDENTITY:?set IDENTITY to a Developer ID Application signing identity}"
: "${NOTARY_PROFILE:?set NOTARY_PROFILE to a notarytool keychain profile}"

version="$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "hearth-cli"))')"
export HEARTH_COMMIT="$(git rev-parse --short=12 HEAD)"
export SHADERC_LIB_DIR="$VULKAN_SDK/lib"
cargo build --release --locked -p hearth-cli --bin hearth -p hearth-gui --bin hearth-gui

out="target/macos"
app="$out/Hearth.app"
rm -rf "$out"
mkdir -p "$app/Contents/MacOS" "$app/Contents/Frameworks" "$app/Contents/Resources/vulkan/icd.d"
cp target/release/hearth target/release/hearth-gui "$app/Contents/MacOS/"
sed "s/@VERSION@/$version/g" packaging/macos/Info.plist > "$app/Contents/Info.plist"

# The icon: the Linux SVG drawn at every size iconutil wants.
set_dir="$out/Hearth.iconset"
mkdir -p "$set_dir"
for size in 16 32 128 256 512; do
    rsvg-convert -w $size -h $size packaging/linux/dev.hearth.Hearth.svg -o "$set_dir/icon_${size}x${size}.png"
    rsvg-convert -w $((size * 2)) -h $((size * 2)) packaging/linux/dev.hearth.Hearth.svg \
        -o "$set_dir/icon_${size}x${size}@2x.png"
done
iconutil -c icns "$set_dir" -o "$app/Contents/Resources/Hearth.icns"

# The Vulkan loader and MoltenVK, with a manifest whose library path is relative to it.
cp "$VULKAN_SDK/lib/libvulkan.1.dylib" "$VULKAN_SDK/lib/libMoltenVK.dylib" "$app/Contents/Frameworks/"
cat > "$app/Contents/Resources/vulkan/icd.d/MoltenVK_icd.json" <<'JSON'
{ "file_format_version": "1.0.0",
  "ICD": { "library_path": "../../../Frameworks/libMoltenVK.dylib", "api_version": "1.2.0",
           "is_portability_driver": true } }
JSON
# ash loads libvulkan.dylib by name: the binaries look in Frameworks first.
for bin in hearth hearth-gui; do
    install_name_tool -add_rpath @executable_path/../Frameworks "$app/Contents/MacOS/$bin"
done
ln -s libvulkan.1.dylib "$app/Contents/Frameworks/libvulkan.dylib"

# Sign inside out with the hardened runtime, then the bundle.
for lib in "$app"/Contents/Frameworks/*.dylib; do
    [ -L "$lib" ] || codesign --force --timestamp --options runtime --sign "$IDENTITY" "$lib"
done
codesign --force --timestamp --options runtime --sign "$IDENTITY" "$app/Contents/MacOS/hearth"
codesign --force --timestamp --options runtime --sign "$IDENTITY" "$app"
codesign --verify --deep --strict --verbose=2 "$app"

dmg="$out/Hearth-$version.dmg"
hdiutil create -volname Hearth -srcfolder "$app" -ov -format UDZO "$dmg"
codesign --force --timestamp --sign "$IDENTITY" "$dmg"
xcrun notarytool submit "$dmg" --keychain-profile "$NOTARY_PROFILE" --wait
xcrun stapler staple "$dmg"
spctl --assess --type open --context context:primary-signature --verbose "$dmg"
(cd "$out" && shasum -a 256 "$(basename "$dmg")" > SHA256SUMS)
echo "notarized: $dmg"
