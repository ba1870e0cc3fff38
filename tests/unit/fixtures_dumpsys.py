"""`adb shell dumpsys package PACKAGE` as Android 10 and Android 14 print it, for the platform
heapprofd's profileable check.

Written from the releases' PackageManager dump code (services/core/java/com/android/server/pm/
Settings.java, dumpPackageLPr): the lines, their order and indentation are the code's; the
values (hashes, paths, dates, ids) are made up, and sections that do not matter here (resolver
tables, permissions, key sets) are cut short. What matters: only `flags=[...]` and
`pkgFlags=[...]` show DEBUGGABLE, and no release prints PROFILEABLE_BY_SHELL (it is missing from
the private-flag names Settings.java knows), so a profileable app looks like any other.
"""

# What comes before the Packages section, the same on both releases but for ids.
_PREAMBLE = """\
Activity Resolver Table:
  Non-Data Actions:
      android.intent.action.MAIN:
        6b1e0f2 {package}/.MainActivity filter 3d9a7c1
          Action: "android.intent.action.MAIN"
          Category: "android.intent.category.LAUNCHER"

Key Set Manager:
  [{package}]
      Signing KeySets: 57

"""

_ANDROID10 = """\
Packages:
  Package [{package}] (4f0c1d2):
    userId=10153
    pkg=Package{{8a3e5b3 {package}}}
    codePath=/data/app/{package}-bT5_Z9yH2kQmX1s0n3VfLg==
    resourcePath=/data/app/{package}-bT5_Z9yH2kQmX1s0n3VfLg==
    legacyNativeLibraryDir=/data/app/{package}-bT5_Z9yH2kQmX1s0n3VfLg==/lib
    primaryCpuAbi=arm64-v8a
    secondaryCpuAbi=null
    versionCode=1 minSdk=21 targetSdk=29
    versionName=1.0
    splits=[base]
    apkSigningVersion=2
    applicationInfo=ApplicationInfo{{2c6f870 {package}}}
    flags=[ {flags}]
    privateFlags=[ PRIVATE_FLAG_ACTIVITIES_RESIZE_MODE_RESIZEABLE_VIA_SDK_VERSION ]
    dataDir=/data/user/0/{package}
    supportsScreens=[small, medium, large, xlarge, resizeable, anyDensity]
    timeStamp=2020-06-03 14:21:07
    firstInstallTime=2020-06-03 14:21:08
    lastUpdateTime=2020-06-03 14:21:08
    signatures=PackageSignatures{{d9e4be9 version:2, signatures:[a1b2c3d4], past signatures:[]}}
    installPermissionsFixed=true
    pkgFlags=[ {flags}]
    requested permissions:
      android.permission.INTERNET
    install permissions:
      android.permission.INTERNET: granted=true
    User 0: ceDataInode=409961 installed=true hidden=false suspended=false stopped=false notLaunched=false enabled=0 instant=false virtual=false
      gids=[3003]
      runtime permissions:

Dexopt state:
  [{package}]
    path: /data/app/{package}-bT5_Z9yH2kQmX1s0n3VfLg==/base.apk
      arm64: [status=quicken] [reason=install]

Compiler stats:
  [{package}]
     base.apk - 412
"""

_ANDROID14 = """\
Packages:
  Package [{package}] (9d3c2a1):
    appId=10211
    pkg=Package{{5be0f46 {package}}}
    codePath=/data/app/~~Xr2kT8c1Jw4mZpQ0sLd7Ag==/{package}-3FhN0b6qRkYw1uVz9eJc2Q==
    resourcePath=/data/app/~~Xr2kT8c1Jw4mZpQ0sLd7Ag==/{package}-3FhN0b6qRkYw1uVz9eJc2Q==
    legacyNativeLibraryDir=/data/app/~~Xr2kT8c1Jw4mZpQ0sLd7Ag==/{package}-3FhN0b6qRkYw1uVz9eJc2Q==/lib
    extractNativeLibs=false
    primaryCpuAbi=arm64-v8a
    secondaryCpuAbi=null
    cpuAbiOverride=null
    versionCode=1 minSdk=24 targetSdk=34
    minExtensionVersions=[]
    versionName=1.0
    hiddenApiEnforcementPolicy=2
    usesNonSdkApi=false
    splits=[base]
    apkSigningVersion=2
    flags=[ {flags}]
    privateFlags=[ PRIVATE_FLAG_ACTIVITIES_RESIZE_MODE_RESIZEABLE_VIA_SDK_VERSION ALLOW_AUDIO_PLAYBACK_CAPTURE PRIVATE_FLAG_ALLOW_NATIVE_HEAP_POINTER_TAGGING ]
    forceQueryable=false
    dataDir=/data/user/0/{package}
    supportsScreens=[small, medium, large, xlarge, resizeable, anyDensity]
    timeStamp=2024-05-14 09:12:44
    lastUpdateTime=2024-05-14 09:12:45
    installerPackageName=com.android.shell
    installerPackageUid=2000
    initiatingPackageName=com.android.shell
    originatingPackageName=null
    packageSource=0
    appMetadataFilePath=null
    signatures=PackageSignatures{{c71a5d2 version:2, signatures:[6e4f0a1b], past signatures:[]}}
    installPermissionsFixed=true
    pkgFlags=[ {flags}]
    privatePkgFlags=[ PRIVATE_FLAG_ACTIVITIES_RESIZE_MODE_RESIZEABLE_VIA_SDK_VERSION ALLOW_AUDIO_PLAYBACK_CAPTURE PRIVATE_FLAG_ALLOW_NATIVE_HEAP_POINTER_TAGGING ]
    apexModuleName=null
    requested permissions:
      android.permission.INTERNET
    install permissions:
      android.permission.INTERNET: granted=true
    User 0: ceDataInode=180367 deDataInode=0 installed=true hidden=false suspended=false distractionFlags=0 stopped=false notLaunched=false enabled=0 instant=false virtual=false quarantined=false
      installReason=0
      dataDir=/data/user/0/{package}
      firstInstallTime=2024-05-14 09:12:45
      uninstallReason=0
      gids=[3003]
      runtime permissions:

Queries:
  system apps queryable: false
  queries via forceQueryable:
  queries via package name:
  queries via component:
  queryable via interaction:
    User 0:

Dexopt state:
  [{package}]
    path: /data/app/~~Xr2kT8c1Jw4mZpQ0sLd7Ag==/{package}-3FhN0b6qRkYw1uVz9eJc2Q==/base.apk
      arm64: [status=speed-profile] [reason=install-dm] [primary-abi]
"""

# Android prints this (from the dexopt section) for a package that is not installed.
_MISSING = """\
Dexopt state:
  Unable to find package: {package}

Compiler stats:
  Unable to find package: {package}
"""

_FLAGS = "HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP "


def package_dump(release: int, package: str, debuggable: bool) -> str:
    """What `dumpsys package PACKAGE` prints on Android `release` (10 or 14) for an installed
    app, debuggable or not (a profileable app prints as a non-debuggable one)."""
    template = {10: _ANDROID10, 14: _ANDROID14}[release]
    flags = ("DEBUGGABLE " if debuggable else "") + _FLAGS
    return (_PREAMBLE + template).format(package=package, flags=flags)


def missing_package_dump(package: str) -> str:
    return _MISSING.format(package=package)
