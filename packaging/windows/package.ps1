# Builds and signs Hearth's Windows installer. Runs on Windows (x64) with: Rust (MSVC), the
# Vulkan SDK (for shaderc: set SHADERC_LIB_DIR to its Lib folder), WiX Toolset 3.14, cargo-wix
# (`cargo install cargo-wix --version 0.3.9`), Python 3, and signtool from the Windows SDK.
#
#   .\packaging\windows\package.ps1 -CertFile code-signing.pfx -CertPassword $env:PFX_PASSWORD
#
# Output: target\wix\hearth-VERSION-x86_64.msi, signed, with SHA256SUMS beside it. The
# binaries inside are signed before they are packed. Vulkan itself comes with the GPU driver.
param(
    [Parameter(Mandatory = $true)] [string] $CertFile,
    [Parameter(Mandatory = $true)] [string] $CertPassword,
    [string] $Timestamp = "http://timestamp.digicert.com"
)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")

$env:HEARTH_COMMIT = (git rev-parse --short=12 HEAD)
cargo build --release --locked -p hearth-cli --bin hearth -p hearth-gui --bin hearth-gui
New-Item -ItemType Directory -Force target\package | Out-Null
python scripts\package-licences target\package\THIRD-PARTY-LICENSES.txt

function Sign($path) {
    signtool sign /fd sha256 /f $CertFile /p $CertPassword /tr $Timestamp /td sha256 $path
    signtool verify /pa $path
}
Sign target\release\hearth.exe
Sign target\release\hearth-gui.exe

# PowerShell completions beside the binaries' docs: `hearth completions powershell`.
target\release\hearth.exe completions powershell > target\package\hearth.ps1

cargo wix -p hearth-cli --no-build --nocapture --output target\wix\
$msi = Get-ChildItem target\wix\*.msi | Select-Object -First 1
Sign $msi.FullName
Get-FileHash -Algorithm SHA256 $msi.FullName |
    ForEach-Object { "{0}  {1}" -f $_.Hash.ToLower(), $msi.Name } |
    Set-Content -Encoding ascii target\wix\SHA256SUMS
Write-Host "signed: $($msi.FullName)"
